"""Attempts without progress on the JobSet backend (trainer/jobset_attempts.py), with an injected store and no
clock: host 0 of each JobSet restart attempt reads the record beside the checkpoints and the newest saved step.

JobSet v0.12.0 facts the record relies on: every pod of an attempt carries the annotation
`jobset.sigs.k8s.io/restart-attempt` = status.restarts (pkg/constants/constants.go RestartsKey,
pkg/controllers/jobset_controller.go labelAndAnnotateObject) and `jobset.sigs.k8s.io/jobset-uid`
(api/jobset/v1alpha2/jobset_types.go JobSetUIDKey); a restart deletes the child Jobs with foreground propagation
and recreates a Job of the same name only once the old one is gone (jobset_controller.go deleteJobs,
shouldCreateJob), and Kueue's suspend/resume recreates pods without a restart (same attempt number)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import exit_codes
from tests.conftest import REPO
from trainer import jobset_attempts as ja

UID = "uid-1"


class MemoryStore:
    """The record's store in memory, with Cloud Storage's generation rule: a write carries the generation it read
    and fails if another write came between. `meddle` runs between a read and the next write (another writer)."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.generation = 0
        self.meddle = None

    def read(self):
        return self.text, self.generation

    def write(self, text, if_generation):
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        if if_generation != self.generation:
            return False
        self.text, self.generation = text, self.generation + 1
        return True

    def record(self) -> ja.Record:
        return ja.Record.load(self.text)


def start(store, attempt, saved, limit=3, uid=UID):
    return ja.start_attempt(store, lambda: saved, uid, attempt, limit)


def test_a_slice_reclaimed_at_every_start_ends_the_run_after_n_attempts_without_a_new_checkpoint():
    store = MemoryStore()
    assert start(store, 0, 200) is None                      # restores step 200, never saves past it
    for attempt in (1, 2):
        ja.note_ending(store, UID, attempt - 1, "a notice (saved)")
        assert start(store, attempt, 200) is None, attempt
    ja.note_ending(store, UID, 2, "a notice (saved)")
    reason = start(store, 3, 200)
    assert reason is not None
    assert "3 JobSet attempts in a row (restarts 0 to 2) saved no checkpoint past step 200" in reason
    assert "limit 3" in reason and "a notice (saved) x3" in reason
    assert store.record().streak == 3


def test_an_attempt_that_saves_a_newer_checkpoint_resets_the_count():
    store = MemoryStore()
    start(store, 0, None)
    assert start(store, 1, None) is None and store.record().streak == 1
    assert start(store, 2, 100) is None and store.record().streak == 0      # attempt 1 saved step 100
    assert start(store, 3, 100) is None and start(store, 4, 100) is None
    assert start(store, 5, 300) is None and store.record().streak == 0
    assert store.record().newest_step == 300 and store.record().endings == []


def test_the_same_attempt_seen_again_is_not_counted():
    """Kueue suspends and resumes the JobSet (waitForPodsReady, recoveryTimeout): the pods start again with the
    same restart attempt; that is a wait for capacity, not an attempt."""
    store = MemoryStore()
    start(store, 0, 50)
    start(store, 1, 50)
    before = (store.text, store.generation)
    for _ in range(5):
        assert start(store, 1, 50) is None
    assert (store.text, store.generation) == before and store.record().streak == 1


def test_restarts_whose_host_0_never_started_are_counted_and_named():
    store = MemoryStore()
    start(store, 0, 10)
    ja.note_ending(store, UID, 0, "host 0 exit 1 (runtime failure)")
    reason = start(store, 3, 10)          # attempts 1 and 2 failed before host 0 got this far
    assert reason is not None and store.record().streak == 3
    assert f"host 0 exit 1 (runtime failure) x1, {ja.NO_WORD} x2" in reason


def test_a_new_jobset_starts_a_fresh_count():
    """relaunchCommand (or a changed manifest) creates a JobSet with a new uid and restarts from 0."""
    store = MemoryStore()
    start(store, 0, 10)
    start(store, 1, 10)
    start(store, 2, 10)
    assert start(store, 0, 10, uid="uid-2") is None
    assert store.record() == ja.Record("uid-2", 0, 10)


def test_a_lost_race_is_read_again_and_the_attempt_counted_once():
    """Two writers of the same attempt (a host 0 pod replaced while the first still ran): the second's write
    over a generation it did not read fails, it reads again and finds the attempt recorded."""
    store = MemoryStore()
    start(store, 0, 10)
    store.meddle = lambda: start(store, 1, 10)
    assert start(store, 1, 10) is None
    assert store.record().attempt == 1 and store.record().streak == 1


def test_a_writer_that_always_loses_says_so():
    class Losing(MemoryStore):
        def write(self, text, if_generation):
            return False

    with pytest.raises(RuntimeError, match="another writer won"):
        start(Losing(), 0, 10)


def test_the_file_store_refuses_a_write_over_a_generation_it_did_not_read(tmp_path):
    store = ja.FileStore(tmp_path / ja.RECORD_NAME)
    text, generation = store.read()
    assert text is None and store.write("a", generation)
    assert not store.write("b", generation)
    assert store.read()[0] == "a" and store.write("b", store.read()[1])


@pytest.mark.parametrize("env, says", [
    ({ja.ENV_LIMIT: "0"}, "TRAINER_ATTEMPTS_WITHOUT_PROGRESS=0: use 1 or more"),
    ({ja.ENV_LIMIT: "three"}, "TRAINER_ATTEMPTS_WITHOUT_PROGRESS='three': not an integer"),
])
def test_bad_pod_settings_are_refused_in_one_line(env, says):
    with pytest.raises(ValueError, match="^" + says.replace("(", r"\(")):
        ja.pod_attempt(env, ["base_output_directory=gs://b/maxtext", "run_name=r"])


def test_a_pod_jobset_did_not_annotate_trains_uncounted_and_says_so():
    """The downward API gives an empty value for a missing annotation: that is JobSet's, not a setting of ours."""
    with pytest.raises(ja.NotCounted, match="^JOBSET_RESTART_ATTEMPT='' is not JobSet's restart-attempt"):
        ja.pod_attempt({ja.ENV_LIMIT: "3", ja.ENV_RESTART_ATTEMPT: ""}, ["base_output_directory=/o", "run_name=r"])


def test_only_host_0_of_slice_0_keeps_the_record():
    overrides = ["base_output_directory=gs://b/maxtext/", "run_name=r"]
    env = {ja.ENV_LIMIT: "4", ja.ENV_RESTART_ATTEMPT: "2", ja.ENV_JOBSET_UID: UID}
    assert ja.pod_attempt(env, overrides) == ja.PodAttempt(UID, 2, 4, "gs://b/maxtext/r")
    assert ja.pod_attempt({**env, ja.ENV_SLICE_INDEX: "1"}, overrides) is None
    assert ja.pod_attempt({**env, ja.ENV_HOST_INDEX: "3"}, overrides) is None
    assert ja.pod_attempt({}, overrides) is None
    assert ja.pod_attempt(env, overrides).checkpoint_dir == "gs://b/maxtext/r/checkpoints"


def _pod(tmp_path: Path, attempt: int, limit: int = 2) -> subprocess.CompletedProcess:
    """trainer.jobset_run as host 0 of a JobSet attempt, its run directory local (FileStore, Orbax's own listing
    of the finalized steps): it decides before MaxText starts."""
    env = {**os.environ, "PYTHONPATH": str(REPO), ja.ENV_LIMIT: str(limit), ja.ENV_RESTART_ATTEMPT: str(attempt),
           ja.ENV_JOBSET_UID: UID, ja.ENV_SLICE_INDEX: "0", ja.ENV_HOST_INDEX: "0", "JAX_PLATFORMS": "cpu"}
    argv = [sys.executable, "-m", "trainer.jobset_run", "base.yml", f"base_output_directory={tmp_path}",
            "run_name=run", "enable_checkpointing=true", "enable_autocheckpoint=true", "steps=0"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)


def test_jobset_run_exits_8_at_the_start_of_the_attempt_after_n_without_a_new_checkpoint(tmp_path):
    (tmp_path / "run" / "checkpoints" / "40" / "items").mkdir(parents=True)
    # An unfinished save (Orbax's temporary name) is not a checkpoint: not progress.
    (tmp_path / "run" / "checkpoints" / "60.orbax-checkpoint-tmp-1").mkdir()
    store = ja.FileStore(tmp_path / "run" / ja.RECORD_NAME)
    store.write(ja.Record(UID, 1, 40, streak=1, endings=["a notice (saved)"]).dump(), "")
    done = _pod(tmp_path, attempt=2)
    assert done.returncode == exit_codes.INTERRUPTED_WITHOUT_PROGRESS, done.stderr[-2000:]
    assert "2 JobSet attempts in a row (restarts 0 to 1) saved no checkpoint past step 40" in done.stderr
    assert all(len(line) <= 100 for line in done.stderr.splitlines() if "trainer.jobset_run" in line)
    assert ja.Record.load(store.read()[0]).attempt == 2


class FakeBucket:
    """Cloud Storage's generation rule as the google-cloud-storage client raises it (PreconditionFailed, HTTP 412;
    ifGenerationMatch=0: the object must not exist, https://cloud.google.com/storage/docs/request-preconditions)."""

    def __init__(self) -> None:
        self.text, self.generation = None, 0

    def get_blob(self, name):
        return None if self.text is None else FakeBlob(self, self.generation)

    def blob(self, name):
        return FakeBlob(self, None)


class FakeBlob:
    def __init__(self, bucket: FakeBucket, generation) -> None:
        self.bucket, self.generation = bucket, generation

    def download_as_text(self, if_generation_match=None):
        from google.api_core.exceptions import PreconditionFailed

        if if_generation_match != self.bucket.generation:
            raise PreconditionFailed("412 conditionNotMet")
        return self.bucket.text

    def upload_from_string(self, text, content_type=None, if_generation_match=None):
        from google.api_core.exceptions import PreconditionFailed

        if if_generation_match != self.bucket.generation:
            raise PreconditionFailed("412 conditionNotMet")
        self.bucket.text, self.bucket.generation = text, self.bucket.generation + 1


def test_the_bucket_store_writes_only_over_the_generation_it_read():
    bucket = FakeBucket()
    store = ja.GcsStore("gs://b/maxtext/run/" + ja.RECORD_NAME, bucket=bucket)
    assert store.read() == (None, 0)
    assert store.write("a", 0) and not store.write("b", 0)
    assert store.read() == ("a", 1)
    # "a" is no record (a hand edit): the count starts afresh over it rather than stop for good.
    assert start(store, 0, 5) is None and ja.Record.load(store.read()[0]) == ja.Record(UID, 0, 5)
