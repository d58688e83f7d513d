"""Attempts without progress on the JobSet backend: a small record beside the run's checkpoints, kept by host 0.

The Ray backend counts attempts in its driver (trainer/watchdog.py), which lives as long as the run. A JobSet has
no such process: every restart (JobSet v0.12.0 pkg/controllers/jobset_controller.go: the child Jobs are deleted
with foreground propagation and recreated only once they are gone, so no pod of the old attempt is left running)
starts every pod afresh, and the failure policy restarts a preempted pod or a slice that left with exit 143
without counting (workloads/failure_policy.py). What survives a restart is the bucket and what JobSet tells the new
pods: each Job and pod carries the label and annotation `jobset.sigs.k8s.io/restart-attempt` = the JobSet's
`status.restarts` (pkg/constants/constants.go RestartsKey, set in jobset_controller.go labelAndAnnotateObject)
and `jobset.sigs.k8s.io/jobset-uid` (api/jobset/v1alpha2/jobset_types.go JobSetUIDKey); the pod reads them
through the downward API (workloads/jobset/manifests.py attempt_env).

The rule is the Ray backend's, with progress read from what survives: an attempt progressed when the newest
checkpoint saved in the bucket (Orbax's finalized steps, what MaxText restores from) is newer than the newest any
earlier attempt had saved. Steps trained but not saved are gone at a JobSet restart (the next attempt trains them
again), so they cannot be told from re-trained ones without a write per step; a notice or a SIGTERM after JAX
listens saves at the step the hosts agree on, so an interrupted attempt that trained new steps shows them. At the
start of each attempt host 0 (slice 0, pod 0) reads the record and the newest saved step: every restart since the
recorded one that saved nothing newer is counted (one whose host 0 never got this far too); N in a row end the
run with exit 8 (core/exit_codes.INTERRUPTED_WITHOUT_PROGRESS, in NOT_RETRYABLE: the podFailurePolicy fails the
JobSet at once). N is core/run_bounds.attempts_without_progress, the one the plan shows.

One writer, made sure of: only host 0 writes, each write carries the generation it read (Cloud Storage's
ifGenerationMatch; a file's content digest in the local store), and a lost race is read again and decided again.
The same restart attempt seen twice (Kueue suspended and resumed the JobSet, which recreates its pods without a
restart) changes nothing. A new JobSet (relaunchCommand, a changed manifest) has a new uid: a fresh count, as a
human chose to resume.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from core import exit_codes

RECORD_NAME = "attempts-without-progress.json"
# The container's environment (workloads/jobset/manifests.py attempt_env sets them).
ENV_LIMIT = "TRAINER_ATTEMPTS_WITHOUT_PROGRESS"
ENV_RESTART_ATTEMPT = "JOBSET_RESTART_ATTEMPT"
ENV_JOBSET_UID = "JOBSET_UID"
ENV_SLICE_INDEX = "JOBSET_JOB_INDEX"
ENV_HOST_INDEX = "JOB_COMPLETION_INDEX"     # set by the Job controller on every pod of an Indexed Job
# How host 0 describes an attempt it did not see end (another host failed, a SIGKILL, a TERM before training).
NO_WORD = "an end host 0 did not see"
WRITE_TRIES = 5


class Store(Protocol):
    """The record's storage: read with its generation (0 when absent), write only over that generation."""

    def read(self) -> tuple[str | None, int | str]: ...

    def write(self, text: str, if_generation: int | str) -> bool: ...


@dataclass(frozen=True)
class Record:
    jobset_uid: str
    attempt: int                      # the JobSet restart attempt whose start host 0 recorded last
    newest_step: int | None           # the newest checkpoint any attempt had saved by then
    streak: int = 0                   # attempts in a row that saved nothing newer
    endings: list[str] = field(default_factory=list)   # what ended the attempts of the streak, as host 0 saw it
    ending: str | None = None         # how host 0 saw the recorded attempt end (written when it leaves)

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def load(text: str) -> "Record":
        raw = json.loads(text)
        return Record(jobset_uid=str(raw["jobset_uid"]), attempt=int(raw["attempt"]),
                      newest_step=raw["newest_step"], streak=int(raw["streak"]), endings=list(raw["endings"]),
                      ending=raw.get("ending"))


def summarize(endings: list[str]) -> str:
    counts = {kind: endings.count(kind) for kind in dict.fromkeys(endings)}
    return ", ".join(f"{kind} x{count}" for kind, count in counts.items()) or NO_WORD


def decide(record: Record | None, jobset_uid: str, attempt: int, newest_step: int | None,
           limit: int) -> tuple[Record, str | None]:
    """The record after host 0 of `attempt` starts with `newest_step` saved, and the reason the run must end
    (None: train). Pure."""
    if record is None or record.jobset_uid != jobset_uid:
        return Record(jobset_uid, attempt, newest_step), None
    if attempt <= record.attempt:
        # The same attempt again (Kueue resumed the suspended JobSet), or an older one's late pod: nothing new.
        return record, None
    progressed = newest_step is not None and (record.newest_step is None or newest_step > record.newest_step)
    if progressed:
        return Record(jobset_uid, attempt, newest_step), None
    ended = attempt - record.attempt
    # The recorded attempt ended as host 0 saw it; any restarts between ended before host 0 got this far.
    endings = (record.endings + [record.ending or NO_WORD] + [NO_WORD] * (ended - 1))[-limit:]
    after = replace(record, attempt=attempt, streak=record.streak + ended, endings=endings, ending=None)
    if after.streak < limit:
        return after, None
    since = "any saved checkpoint" if record.newest_step is None else f"step {record.newest_step}"
    return after, (f"{after.streak} JobSet attempts in a row (restarts {attempt - after.streak} to {attempt - 1}) "
                   f"saved no checkpoint past {since} (limit {limit}, core/run_bounds.py): each ended by "
                   f"{summarize(endings)}")


def _parsed(text: str | None) -> Record | None:
    """The stored record; a record that does not parse (a hand edit, an older format) counts afresh rather than
    stop counting for good."""
    if text is None:
        return None
    try:
        return Record.load(text)
    except (ValueError, KeyError, TypeError):
        return None


def _update(store: Store, change: Callable[[Record | None], tuple[Record | None, str | None]]
            ) -> str | None:
    for _ in range(WRITE_TRIES):
        text, generation = store.read()
        record = _parsed(text)
        after, reason = change(record)
        if after is None or after == record:
            return reason
        if store.write(after.dump(), generation):
            return reason
    raise RuntimeError(f"{RECORD_NAME}: another writer won {WRITE_TRIES} times in a row")


def start_attempt(store: Store, newest_saved_step: Callable[[], int | None], jobset_uid: str, attempt: int,
                  limit: int) -> str | None:
    """Host 0 at the start of `attempt`: record it; the reason the run must end, or None."""
    newest = newest_saved_step()
    return _update(store, lambda record: decide(record, jobset_uid, attempt, newest, limit))


def note_ending(store: Store, jobset_uid: str, attempt: int, ending: str) -> None:
    """Host 0 leaving `attempt`: how it ended, for the line that ends a streak."""
    def change(record: Record | None) -> tuple[Record | None, None]:
        if record is None or record.jobset_uid != jobset_uid or record.attempt != attempt:
            return None, None
        return replace(record, ending=ending), None

    _update(store, change)


# ---- where the record and the checkpoints live ----------------------------------------------------------

class FileStore:
    """A local directory (trainer.local, tests): the generation is the content's digest, checked under a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> tuple[str | None, str]:
        if not self.path.exists():
            return None, ""
        text = self.path.read_text()
        return text, hashlib.sha256(text.encode()).hexdigest()

    def write(self, text: str, if_generation: int | str) -> bool:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.read()[1] != if_generation:
                return False
            scratch = self.path.with_suffix(".tmp")
            scratch.write_text(text)
            os.replace(scratch, self.path)
        return True


class GcsStore:
    """An object in the checkpoint bucket; Cloud Storage's generation preconditions make the write conditional
    (https://cloud.google.com/storage/docs/request-preconditions: ifGenerationMatch=0 means "does not exist")."""

    def __init__(self, url: str, bucket=None) -> None:
        bucket_name, _, name = url.removeprefix("gs://").partition("/")
        self.blob_name = name
        if bucket is None:
            from google.cloud import storage

            bucket = storage.Client().bucket(bucket_name)
        self.bucket = bucket

    def read(self) -> tuple[str | None, int]:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        for _ in range(WRITE_TRIES):
            blob = self.bucket.get_blob(self.blob_name)
            if blob is None:
                return None, 0
            # The text of exactly the generation returned: a write between the two calls is read again. The
            # number is taken before the download, which resets the blob's fields from the response's headers.
            generation = int(blob.generation)
            try:
                return blob.download_as_text(if_generation_match=generation), generation
            except (PreconditionFailed, NotFound):
                continue
        raise RuntimeError(f"{RECORD_NAME}: changed under every read")

    def write(self, text: str, if_generation: int | str) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self.bucket.blob(self.blob_name).upload_from_string(text, content_type="application/json",
                                                                if_generation_match=int(if_generation))
        except PreconditionFailed:
            return False
        return True


def record_store(run_directory: str) -> Store:
    url = f"{run_directory.rstrip('/')}/{RECORD_NAME}"
    return GcsStore(url) if url.startswith("gs://") else FileStore(Path(url))


def newest_saved_step(checkpoint_dir: str) -> int | None:
    """The newest finalized checkpoint step (Orbax's own test: orbax.checkpoint.utils.checkpoint_steps, commit
    markers on Cloud Storage), the one MaxText would restore."""
    from orbax.checkpoint import utils as orbax_utils

    return max(orbax_utils.checkpoint_steps(checkpoint_dir), default=None)


# ---- the pod's side -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodAttempt:
    jobset_uid: str
    attempt: int
    limit: int
    run_directory: str

    @property
    def checkpoint_dir(self) -> str:
        return f"{self.run_directory.rstrip('/')}/checkpoints"


class NotCounted(Exception):
    """The pod cannot tell its attempt (JobSet did not annotate it): it trains, uncounted, and says so."""


def limit_from_env(env: dict[str, str]) -> int | None:
    """N from the container's environment; None when unset. ValueError (one line) when it is not 1 or more."""
    text = env.get(ENV_LIMIT)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{ENV_LIMIT}={text!r}: not an integer; use 1 or more") from None
    if value < 1:
        raise ValueError(f"{ENV_LIMIT}={value}: use 1 or more")
    return value


def pod_attempt(env: dict[str, str], overrides: list[str]) -> PodAttempt | None:
    """What host 0 of a JobSet attempt needs to keep the record; None on every other host, or with no limit set.
    ValueError (one line) on a bad limit or a missing run directory (the project's own settings: refused);
    NotCounted when JobSet's restart-attempt annotation did not reach the pod (another JobSet version)."""
    limit = limit_from_env(env)
    if limit is None or env.get(ENV_SLICE_INDEX, "0") != "0" or env.get(ENV_HOST_INDEX, "0") != "0":
        return None
    keys = dict(item.partition("=")[::2] for item in overrides)
    if not keys.get("base_output_directory") or not keys.get("run_name"):
        raise ValueError(f"{ENV_LIMIT} is set but MaxText's base_output_directory and run_name are not: "
                         "there is no run directory to keep the count in")
    try:
        attempt = int(env.get(ENV_RESTART_ATTEMPT, ""))
    except ValueError:
        raise NotCounted(f"{ENV_RESTART_ATTEMPT}={env.get(ENV_RESTART_ATTEMPT)!r} is not JobSet's restart-attempt "
                         "annotation (an integer): attempts without progress are not counted") from None
    return PodAttempt(jobset_uid=env.get(ENV_JOBSET_UID, ""), attempt=attempt, limit=limit,
                      run_directory=f"{keys['base_output_directory'].rstrip('/')}/{keys['run_name']}")


def exit_line(reason: str) -> str:
    return (f"trainer.jobset_run: {reason}; exiting {exit_codes.INTERRUPTED_WITHOUT_PROGRESS} "
            f"({exit_codes.describe(exit_codes.INTERRUPTED_WITHOUT_PROGRESS)}, not retried)")
