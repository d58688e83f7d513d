"""The RayJob's submitter: submit the job once, then watch its status until it ends; the log is a side stream.

KubeRay (v1.7.0, K8sJobMode) runs this in the submitter pod, a Kubernetes Job it creates once the cluster is
Ready, and reads the run's fate from two places (ray-operator/controllers/ray/rayjob_controller.go):
- the submitter Job: Failed (its pods exhausted `submitterConfig.backoffLimit`) ends the RayJob at once
  (`checkSubmitterAndUpdateStatusIfNeeded`), and finished (Complete or Failed) while the Ray job is not terminal
  ends it 30 s later (`checkSubmitterFinishedTimeoutAndUpdateStatusIfNeeded`, DefaultSubmitterFinishedTimeout);
  the RayJob becomes Complete/Failed only when the Ray job is terminal *and* the submitter has finished;
- the Ray job's status, which the operator polls itself (`GetJobInfo`); failing polls for 300 s fail the RayJob
  (`checkJobStatusCheckTimeoutAndUpdateStatusIfNeeded`, DEFAULT_RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS).
With `shutdownAfterJobFinishes` an ended RayJob deletes its cluster, so the submitter must exit exactly when the
Ray job has ended, and never because of a network blip. KubeRay's default command ends with
`ray job logs --follow` (common/job.go BuildJobSubmitCommand), which exits when the log stream drops
(ray-project/ray#60665, #51601, #57037): a healthy run ended by a closed WebSocket.

So this program (the pod's own command, which KubeRay keeps: `configureSubmitterContainer` builds its default
only when the container has no command) does, with the environment KubeRay gives the container
(RAY_DASHBOARD_ADDRESS, RAY_JOB_SUBMISSION_ID, and RAY_AUTH_MODE/RAY_AUTH_TOKEN for the cluster's token, which
Ray's JobSubmissionClient sends on every request):
1. wait for the head's job API (bounded: START_WAIT_S);
2. submit the job under KubeRay's submission id unless the cluster already has it (a retried pod must not
   submit twice, kuberay#2154), uploading the mounted code as the job's working_dir as `ray job submit` does;
3. poll the job's status every POLL_S until it is terminal, then exit 0 whatever the status: KubeRay takes
   SUCCEEDED/FAILED from the Ray job itself, and exiting 1 on FAILED would only make the Job retry the pod while
   every slice still bills (KubeRay's own submitter, `ray job logs --follow`, also exits 0 on a failed job);
   failed polls are retried; only polls failing for OUTAGE_LIMIT_S in a row, or the cluster losing the job,
   make it give up (exit 1: the Job's one retry, then KubeRay's SubmissionFailed);
   whether the cluster is gone is never read from a network error: the head Service is headless with
   publishNotReadyAddresses (common/service.go), so "connection refused" is a head pod with nothing listening.
   After a failed poll the submitter asks the Kubernetes API what KubeRay's own objects say
   (trainer/kuberay_watch.py): the RayJob deleted or Complete/Failed/Suspending/Retrying, or its RayCluster
   deleted, means KubeRay deleted the cluster (after activeDeadlineSeconds or its own failing status checks it
   fails the RayJob and deletes the RayCluster, not this Job: rayjob_controller.go v1.7.0,
   deleteClusterResources). Then nothing is left to watch: it says so and exits 0 at once instead of polling a
   dead address and being retried. Anything else, an unanswered API included, is doubt: it keeps polling;
4. meanwhile follow the driver's log into this pod's output (kubectl logs, Cloud Logging), reconnecting after a
   drop and skipping what was already printed (the tail endpoint restarts from the top of the log). The log
   never decides anything, and the program waits at most LOG_DRAIN_S for its end: the cluster, every slice
   with it, lives until this pod exits.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from core import exit_codes
from core.cli_errors import OneLineParser
from trainer.kuberay_watch import GONE, NoWatch, cluster_watch

# Seconds between status polls: a finished run holds its slices at most this long before the submitter sees it.
POLL_S = 10.0
# How long the head's job API may stay unreachable before the first submission (KubeRay creates this pod only
# once the cluster is Ready, so this is only the head Service settling).
START_WAIT_S = 600.0
# How long status polls may fail in a row before the submitter gives up. Twice the operator's own limit on
# failing status checks (300 s, above): where the head is really gone KubeRay ends the RayJob first, with its
# own reason; the submitter gives up only when the operator still reaches the head and this pod does not,
# and then the Job's one retry brings a new pod, possibly on another node.
OUTAGE_LIMIT_S = 600.0
# Pause after a failed request, doubling up to the cap.
RETRY_FIRST_S, RETRY_CAP_S = 2.0, 30.0
# Seconds a single request may take (Ray's client sets no timeout: a half-open connection would hang forever).
REQUEST_TIMEOUT_S = 60.0
# After the job ends, how long to wait for the rest of its log.
LOG_DRAIN_S = 10.0
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
EXIT_GAVE_UP = exit_codes.RUNTIME_FAILURE


class NotFound(Exception):
    """The cluster does not know the job (HTTP 404 from the job API)."""


class Unreachable(Exception):
    """A request failed or timed out: the head, the Service or the network; worth another try."""


@dataclass(frozen=True)
class JobState:
    status: str
    message: str = ""


# watch()'s answer when the job's cluster was deleted under it.
CLUSTER_GONE = JobState("CLUSTER_GONE")


class RayJobApi:
    """The few calls the submitter makes, through Ray's JobSubmissionClient (token auth from the environment),
    each with a timeout and with errors sorted into NotFound / Unreachable / other (a refusal)."""

    def __init__(self, address: str, timeout_s: float = REQUEST_TIMEOUT_S):
        self.address = address if "://" in address else f"http://{address}"
        self.timeout_s = timeout_s
        self._client = None

    def _call(self, fn: Callable[[], Any]) -> Any:
        result: dict[str, Any] = {}

        def target():
            try:
                result["value"] = fn()
            except BaseException as err:   # handed to the caller's thread
                result["error"] = err

        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise Unreachable(f"no answer from {self.address} in {self.timeout_s:.0f}s")
        if "error" in result:
            raise _sorted_error(result["error"])
        return result.get("value")

    def client(self):
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            # The constructor asks the server for its version: it fails while the head is unreachable.
            self._client = self._call(lambda: JobSubmissionClient(self.address))
        return self._client

    def state(self, job_id: str) -> JobState:
        client = self.client()
        info = self._call(lambda: client.get_job_info(job_id))
        return JobState(str(getattr(info.status, "value", info.status)), info.message or "")

    def submit(self, job_id: str, entrypoint: str, runtime_env: dict) -> None:
        client = self.client()
        self._call(lambda: client.submit_job(entrypoint=entrypoint, submission_id=job_id, runtime_env=runtime_env))

    def tail(self, job_id: str):
        return self.client().tail_job_logs(job_id)


def _sorted_error(err: BaseException) -> BaseException:
    """Ray's client raises requests' ConnectionError/Timeout for the network, RuntimeError("Request failed with
    status code N: ...") for an HTTP error (ray/dashboard/modules/dashboard_sdk.py `_raise_error`)."""
    text = str(err)
    if "status code 404" in text:
        return NotFound(text)
    network: tuple[type, ...] = (ConnectionError, TimeoutError)
    try:
        import requests

        network += (requests.exceptions.RequestException,)
    except ImportError:
        pass
    if isinstance(err, network) or "status code 5" in text:
        return Unreachable(f"{type(err).__name__}: {text}")
    # Anything else is a refusal (a 4xx such as a bad runtime env or a wrong token) or a local error (the
    # working_dir missing): another try would get the same answer.
    return err


def _brief(err: BaseException, width: int = 60) -> str:
    """An error in a few words, for the lines a retry repeats (each within 100 columns)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= width else text[:width - 3] + "..."


@dataclass
class Clock:
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass
class LogFollower:
    """Prints the job's log as it grows, across dropped streams, each character once."""

    api: Any
    job_id: str
    out: Any = field(default_factory=lambda: sys.stdout)
    first_pause_s: float = RETRY_FIRST_S
    max_pause_s: float = RETRY_CAP_S
    printed: int = 0
    reconnects: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    async def _stream_once(self) -> None:
        seen = 0
        async for chunk in self.api.tail(self.job_id):
            # The tail endpoint starts at the top of the log on every connection (Ray 2.60
            # dashboard/modules/job/utils.py file_tail_iterator opens the driver's log file from its start):
            # skip what was printed.
            fresh = chunk[max(0, self.printed - seen):]
            seen += len(chunk)
            if fresh:
                self.out.write(fresh)
                self.out.flush()
                self.printed += len(fresh)

    def follow(self) -> None:
        """Stream, and after a drop stream again, until the job has ended (`done`); then one last pass for what
        the job wrote after the last drop (the stream of an ended job closes by itself)."""
        pause = self.first_pause_s
        while True:
            last = self.done.is_set()
            try:
                asyncio.run(self._stream_once())
                pause = self.first_pause_s
            except Exception as err:   # a dropped stream, or the head not answering: the poll decides
                print(f"submitter: log stream dropped ({_brief(err)}); reconnecting", file=sys.stderr, flush=True)
            self.reconnects += 1
            if last:
                return
            # A stream that ended cleanly ends with the job; the poll says when that is.
            self.done.wait(pause)
            pause = min(pause * 2, self.max_pause_s)


@dataclass
class Submitter:
    api: Any
    job_id: str
    entrypoint: str
    runtime_env: dict
    clock: Clock = field(default_factory=Clock)
    poll_s: float = POLL_S
    start_wait_s: float = START_WAIT_S
    outage_limit_s: float = OUTAGE_LIMIT_S
    # What KubeRay's objects say about the cluster (trainer/kuberay_watch.py); asked only after a failed poll.
    cluster: Any = field(default_factory=lambda: NoWatch("no cluster watch given"))

    def _log(self, message: str) -> None:
        print(f"submitter: {message}", file=sys.stderr, flush=True)

    def ensure_submitted(self) -> bool:
        """Submit unless the cluster has the job already; False when the head never answered."""
        deadline = self.clock.now() + self.start_wait_s
        pause = RETRY_FIRST_S
        while True:
            try:
                state = self.api.state(self.job_id)
                self._log(f"job {self.job_id} already submitted ({state.status}): watching it")
                return True
            except NotFound:
                try:
                    self.api.submit(self.job_id, self.entrypoint, self.runtime_env)
                    self._log(f"submitted job {self.job_id}")
                    return True
                except Unreachable as err:
                    # The request may have reached the server: the next round asks before submitting again.
                    self._log(f"submission unanswered ({_brief(err)}); checking again")
                except Exception:
                    # Refused; if only because another pod's submission got there first, watch that job.
                    if not self._known():
                        raise
                    self._log(f"job {self.job_id} submitted meanwhile: watching it")
                    return True
            except Unreachable as err:
                self._log(f"job API not reachable yet ({_brief(err)})")
            if self.clock.now() + pause > deadline:
                self._log(f"job API unreachable for {self.start_wait_s:.0f}s: giving up")
                return False
            self.clock.sleep(pause)
            pause = min(pause * 2, RETRY_CAP_S)

    def _known(self) -> bool:
        try:
            self.api.state(self.job_id)
            return True
        except Exception:
            return False

    def watch(self) -> JobState | None:
        """Poll until the job is terminal (its state), the cluster is gone (CLUSTER_GONE) or the submitter must
        give up (None). The job was seen before this is called (ensure_submitted)."""
        failing_since: float | None = None
        while True:
            try:
                state = self.api.state(self.job_id)
            except NotFound:
                self._log(f"the cluster no longer knows job {self.job_id} (its head restarted?): giving up")
                return None
            except Unreachable as err:
                now = self.clock.now()
                failing_since = now if failing_since is None else failing_since
                verdict = self.cluster.verdict()
                if verdict.state == GONE:
                    self._log(f"the cluster is gone: {verdict.reason}")
                    return CLUSTER_GONE
                if now - failing_since >= self.outage_limit_s:
                    self._log(f"status unreachable for {now - failing_since:.0f}s ({_brief(err)}): giving up")
                    return None
                self._log(f"status poll failed ({_brief(err, 40)}); cluster {verdict.state}: retrying")
            else:
                if failing_since is not None:
                    self._log(f"status reachable again after {self.clock.now() - failing_since:.0f}s")
                failing_since = None
                if state.status in TERMINAL:
                    return state
            self.clock.sleep(self.poll_s)

    def run(self, follower: LogFollower | None = None) -> int:
        try:
            return self._run(follower)
        except (NotFound, Unreachable) as err:   # sorted where they are retried; never expected here
            self._log(f"giving up: {err}")
        except Exception as err:
            self._log(f"refused: {type(err).__name__}: {' '.join(str(err).split())}")
        return EXIT_GAVE_UP

    def _run(self, follower: LogFollower | None) -> int:
        if not self.ensure_submitted():
            return EXIT_GAVE_UP
        thread = None
        if follower is not None:
            thread = threading.Thread(target=follower.follow, daemon=True)
            thread.start()
        state = self.watch()
        if follower is not None:
            follower.done.set()
            thread.join(LOG_DRAIN_S)
        if state is None:
            return EXIT_GAVE_UP
        if state is CLUSTER_GONE:
            # 0: KubeRay has ended the RayJob and deleted its cluster; a failed pod would only be run again to
            # wait for a dead head.
            return exit_codes.OK
        self._log(f"job {self.job_id} ended: {state.status}" + (f": {state.message}" if state.message else ""))
        return exit_codes.OK


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m trainer.submitter", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entrypoint", required=True, help="the job's shell command (the RayJob's entrypoint)")
    parser.add_argument("--runtime-env-json", default="{}", help="the job's runtime env as JSON")
    parser.add_argument("--address", default=os.environ.get("RAY_DASHBOARD_ADDRESS"),
                        help="the head's job API, host:port (default: $RAY_DASHBOARD_ADDRESS, set by KubeRay)")
    parser.add_argument("--submission-id", default=os.environ.get("RAY_JOB_SUBMISSION_ID"),
                        help="the job's id (default: $RAY_JOB_SUBMISSION_ID, set by KubeRay)")
    parser.add_argument("--poll-seconds", type=float, default=POLL_S)
    parser.add_argument("--outage-limit-seconds", type=float, default=OUTAGE_LIMIT_S)
    parser.add_argument("--start-wait-seconds", type=float, default=START_WAIT_S)
    parser.add_argument("--no-logs", action="store_true", help="do not follow the driver's log")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.address or not args.submission_id:
        parser.error("--address and --submission-id (or KubeRay's RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID)"
                     " are required")
    try:
        runtime_env = json.loads(args.runtime_env_json)
    except json.JSONDecodeError as err:
        parser.error(f"--runtime-env-json is not JSON: {err}")
    api = RayJobApi(args.address)
    submitter = Submitter(api, args.submission_id, args.entrypoint, runtime_env, poll_s=args.poll_seconds,
                          start_wait_s=args.start_wait_seconds, outage_limit_s=args.outage_limit_seconds,
                          cluster=cluster_watch(os.environ))
    follower = None if args.no_logs else LogFollower(api, args.submission_id)
    return submitter.run(follower)


if __name__ == "__main__":
    sys.exit(main())
