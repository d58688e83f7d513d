"""The RayJob's submitter (trainer/submitter.py) against what KubeRay v1.7.0 does with it.

KubeRay's rules, played by `kuberay_running_step` below, are read from ray-project/kuberay v1.7.0
ray-operator/controllers/ray/rayjob_controller.go, the JobDeploymentStatusRunning case of `Reconcile`, in its
order:
1. `checkSubmitterAndUpdateStatusIfNeeded` (K8sJobMode): the submitter Job has a Failed condition (its pods used
   up submitterConfig.backoffLimit) -> Failed, reason AppFailed if the Ray job is already FAILED, else
   SubmissionFailed; `finishedAt` is the time of the Job's Complete or Failed condition (`getJobFinishedCondition`).
2. `checkSubmitterFinishedTimeoutAndUpdateStatusIfNeeded`: `finishedAt` + 30 s (DefaultSubmitterFinishedTimeout)
   has passed -> Failed, reason JobDeploymentStatusTransitionGracePeriodExceeded, whatever the Ray job does.
3. GetJobInfo: the Ray job terminal *and* `finishedAt` set (`utils.HasSubmitter`) -> Complete, or Failed with
   AppFailed for a FAILED job; otherwise Running.
and `DEFAULT_RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS` (utils/constant.go, 300 s): the operator's own limit on failing
status checks. With shutdownAfterJobFinishes (the stack's RayJob) Complete or Failed deletes the cluster.
"""
from __future__ import annotations

import asyncio
import io
import threading

import pytest
import requests

from core import exit_codes
from trainer import submitter as sub
from trainer import kuberay_watch as kw
from trainer.submitter import JobState, LogFollower, NotFound, RayJobApi, Submitter, Unreachable

SUBMITTER_FINISHED_TIMEOUT_S = 30         # rayjob_controller.go DefaultSubmitterFinishedTimeout
OPERATOR_STATUS_CHECK_TIMEOUT_S = 300     # utils/constant.go DEFAULT_RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}   # rayv1.IsJobTerminal


def kuberay_running_step(*, submitter_failed: bool, finished_at: float | None, ray_status: str,
                         now: float) -> tuple[str, str]:
    """One reconcile of a Running K8sJobMode RayJob (module docstring): (JobDeploymentStatus, reason)."""
    verdict = None
    if submitter_failed:                                                        # rule 1
        verdict = ("Failed", "AppFailed" if ray_status == "FAILED" else "SubmissionFailed")
    if finished_at is not None and now >= finished_at + SUBMITTER_FINISHED_TIMEOUT_S:   # rule 2
        return "Failed", "JobDeploymentStatusTransitionGracePeriodExceeded"
    if verdict:
        return verdict
    if ray_status in TERMINAL and finished_at is not None:                      # rule 3
        return ("Failed", "AppFailed") if ray_status == "FAILED" else ("Complete", "")
    return "Running", ""


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class FakeHead:
    """The head's job API as the submitter sees it, on the fake clock: the job runs `run_s` after its submission
    and then ends `final`; the API does not answer during the `outages` windows (start, end)."""

    def __init__(self, clock: FakeClock, run_s: float, final: str = "SUCCEEDED", outages=(),
                 already_submitted: bool = False, forget_at: float | None = None, answer_submit: bool = True):
        self.clock, self.run_s, self.final, self.outages = clock, run_s, final, list(outages)
        self.submitted_at = 0.0 if already_submitted else None
        self.submissions = 0
        self.forget_at = forget_at
        self.answer_submit = answer_submit

    def _check(self):
        if any(start <= self.clock.t < end for start, end in self.outages):
            raise Unreachable("ConnectionError: connection refused")

    def status_at(self, t: float) -> str:
        if self.submitted_at is None:
            return "NOT SUBMITTED"
        return "RUNNING" if t < self.submitted_at + self.run_s else self.final

    def state(self, job_id: str) -> JobState:
        self._check()
        if self.submitted_at is None or (self.forget_at is not None and self.clock.t >= self.forget_at):
            raise NotFound("Request failed with status code 404: Job does not exist.")
        return JobState(self.status_at(self.clock.t))

    def submit(self, job_id: str, entrypoint: str, runtime_env: dict) -> None:
        self._check()
        self.submissions += 1
        self.submitted_at = self.clock.t
        if not self.answer_submit:
            self.answer_submit = True
            raise Unreachable("no answer in 60s")   # the request reached the server, the answer was lost


def run_submitter(head: FakeHead, clock: FakeClock, **kwargs) -> tuple[int, float]:
    code = Submitter(head, "rayjob-abc", "python -m trainer.entrypoint", {"working_dir": "/code"}, clock=clock,
                     **kwargs).run()
    return code, clock.t


def kuberay_verdict_after(head: FakeHead, code: int, exited_at: float) -> tuple[str, str]:
    """What the operator decides at its first reconcile after the submitter exited with `code` (exit 0: the Job
    is Complete; otherwise its one retry is played by the caller and this is the Job Failed)."""
    return kuberay_running_step(submitter_failed=code != 0, finished_at=exited_at,
                                ray_status=head.status_at(exited_at), now=exited_at + 1)


# ---- a dropped connection does not end a healthy run -------------------------------------------------------

def test_an_outage_shorter_than_the_limit_does_not_end_a_healthy_run():
    clock = FakeClock()
    outage = (600.0, 600.0 + sub.OUTAGE_LIMIT_S - 30)    # the head unreachable for 9.5 minutes mid-run
    head = FakeHead(clock, run_s=3600, outages=[outage])
    code, exited_at = run_submitter(head, clock)
    assert code == exit_codes.OK and head.submissions == 1
    # It left only once the job had ended (never while the run was healthy), within one poll of the end.
    assert head.submitted_at + head.run_s <= exited_at <= head.submitted_at + head.run_s + sub.POLL_S
    assert kuberay_verdict_after(head, code, exited_at) == ("Complete", "")


def test_a_failed_job_is_reported_by_kuberay_from_the_ray_job_not_by_a_retried_submitter():
    clock = FakeClock()
    head = FakeHead(clock, run_s=100, final="FAILED")
    code, exited_at = run_submitter(head, clock)
    # Exit 0: a non-zero exit would make the Job start a second pod while every slice still bills.
    assert code == exit_codes.OK
    assert kuberay_verdict_after(head, code, exited_at) == ("Failed", "AppFailed")


def test_kuberays_own_submitter_ends_a_healthy_run_when_its_log_stream_drops():
    """The rule the submitter is built around: KubeRay's default command ends with `ray job logs --follow`
    (common/job.go BuildJobSubmitCommand), which returns when the stream drops; 30 s later the RayJob fails and
    its cluster is deleted while the Ray job still runs."""
    drop_at = 1200.0
    steps = [kuberay_running_step(submitter_failed=False, finished_at=drop_at, ray_status="RUNNING", now=t)
             for t in (drop_at + 5, drop_at + SUBMITTER_FINISHED_TIMEOUT_S)]
    assert steps == [("Running", ""), ("Failed", "JobDeploymentStatusTransitionGracePeriodExceeded")]


def test_the_submitter_outlasts_the_operators_own_status_check_limit():
    # Where the head is really gone the operator fails the RayJob first, with its own reason; the submitter gives
    # up only where the operator reaches the head and this pod does not.
    assert sub.OUTAGE_LIMIT_S > OPERATOR_STATUS_CHECK_TIMEOUT_S


def test_an_outage_beyond_the_limit_gives_up_and_the_jobs_retry_resumes_watching():
    clock = FakeClock()
    head = FakeHead(clock, run_s=5000, outages=[(300.0, 300.0 + sub.OUTAGE_LIMIT_S + 100)])
    code, exited_at = run_submitter(head, clock)
    assert code == sub.EXIT_GAVE_UP
    assert 300 + sub.OUTAGE_LIMIT_S <= exited_at < 300 + sub.OUTAGE_LIMIT_S + sub.POLL_S + 1
    # The submitter Job's one retry (submitterConfig.backoffLimit 1): a new pod finds the job and watches it to
    # its end without submitting it again.
    code, exited_at = run_submitter(head, clock)
    assert code == exit_codes.OK and head.submissions == 1
    assert kuberay_verdict_after(head, code, exited_at) == ("Complete", "")


# ---- "the cluster is gone" comes from KubeRay's objects, never from a refused connection -------------------
# KubeRay v1.7.0 ray-operator/controllers/ray/common/service.go BuildHeadServiceForRayJob / BuildHeadService: the
# head Service is headless (ClusterIP None) with PublishNotReadyAddresses true, so its name resolves to a head pod
# that exists with nothing listening yet; "connection refused" is not a deleted cluster. An exit then fails the
# RayJob 30 s later (SUBMITTER_FINISHED_TIMEOUT_S, rule 2 above) and deletes the cluster.

class FakeKubeRay:
    """KubeRay's objects as the submitter's watch reads them, on the fake clock: the RayJob turns `final_state`
    at `deleted_at` (and its cluster goes); `api_down` makes every read fail (in doubt)."""

    def __init__(self, clock: FakeClock, deleted_at: float | None = None, final_state: str = "Failed",
                 api_down: bool = False):
        self.clock, self.deleted_at, self.final_state, self.api_down = clock, deleted_at, final_state, api_down
        self.reads: list[str] = []

    def get(self, path: str):
        self.reads.append(path)
        if self.api_down:
            raise kw.ReadFailed("URLError: timed out")
        gone = self.deleted_at is not None and self.clock.t >= self.deleted_at
        if path == kw.rayjob_path("ns", "rayjob-abc"):
            state = self.final_state if gone else "Running"
            return {"status": {"jobDeploymentStatus": state, "rayClusterName": "rayjob-abc-x7k2p"}}
        if path.endswith("/rayclusters/rayjob-abc-x7k2p"):
            return None if gone else {"metadata": {"name": "rayjob-abc-x7k2p"}}
        raise AssertionError(path)

    def watch(self) -> kw.ClusterWatch:
        return kw.ClusterWatch(self.get, "ns", "rayjob-abc")


def test_a_refused_head_with_its_cluster_present_is_waited_for_not_taken_for_a_deleted_cluster():
    # The head pod is replaced mid-run: its address refuses connections for 5 minutes (less than the outage
    # limit), the RayJob stays Running and its RayCluster exists all along.
    clock = FakeClock()
    head = FakeHead(clock, run_s=3600, outages=[(600.0, 900.0)])
    kuberay = FakeKubeRay(clock)
    code, exited_at = run_submitter(head, clock, cluster=kuberay.watch())
    assert code == exit_codes.OK and exited_at >= head.run_s       # watched to the job's end
    assert kuberay.reads, "the submitter never asked KubeRay's objects during the outage"
    assert kuberay_verdict_after(head, code, exited_at) == ("Complete", "")


@pytest.mark.parametrize("final_state", ["Failed", "Complete", "Suspending", "Retrying"])
def test_a_cluster_kuberay_deleted_ends_the_submitter_with_exit_0_at_once(final_state):
    # rayjob_controller.go Reconcile: Complete/Failed with shutdownAfterJobFinishes (handleShutdownAfterJobFinishes)
    # and Suspending/Retrying call deleteClusterResources; the submitter Job is left (not deleted).
    clock = FakeClock()
    head = FakeHead(clock, run_s=5000, outages=[(1000.0, 1e9)])
    kuberay = FakeKubeRay(clock, deleted_at=1000.0, final_state=final_state)
    code, exited_at = run_submitter(head, clock, cluster=kuberay.watch())
    assert code == exit_codes.OK and exited_at < 1000 + sub.POLL_S + 1


def test_a_deleted_rayjob_or_raycluster_is_gone_and_a_running_one_is_present():
    clock = FakeClock()
    assert FakeKubeRay(clock).watch().verdict().state == kw.PRESENT
    assert FakeKubeRay(clock, deleted_at=0.0, final_state="Running").watch().verdict() == kw.Verdict(
        kw.GONE, "its RayCluster was deleted")
    deleting = {kw.rayjob_path("ns", "j"): {"status": {"jobDeploymentStatus": "Running", "rayClusterName": "c"}},
                "/apis/ray.io/v1/namespaces/ns/rayclusters/c": {"metadata": {"deletionTimestamp": "2026-12-01T00:00Z"}}}
    assert kw.ClusterWatch(deleting.get, "ns", "j").verdict().state == kw.GONE
    assert kw.ClusterWatch({}.get, "ns", "j").verdict() == kw.Verdict(kw.GONE, "RayJob j deleted")


def test_without_an_answer_from_the_api_the_submitter_keeps_polling_to_its_outage_limit():
    clock = FakeClock()
    head = FakeHead(clock, run_s=5000, outages=[(300.0, 1e9)])
    code, exited_at = run_submitter(head, clock, cluster=FakeKubeRay(clock, api_down=True).watch())
    # Never exit 0 on doubt: exit 1 after the outage limit (the Job's one retry), which is longer than KubeRay's
    # own tolerance of failing status checks (OPERATOR_STATUS_CHECK_TIMEOUT_S).
    assert code == sub.EXIT_GAVE_UP and exited_at >= 300 + sub.OUTAGE_LIMIT_S
    # The same without the RayJob's name (no watch): doubt, never "gone".
    clock = FakeClock()
    head = FakeHead(clock, run_s=5000, outages=[(300.0, 1e9)])
    code, exited_at = run_submitter(head, clock, cluster=kw.cluster_watch({}))
    assert code == sub.EXIT_GAVE_UP and exited_at >= 300 + sub.OUTAGE_LIMIT_S


def test_the_watch_reads_the_pods_rayjob_from_the_environment_the_stack_gives_it():
    watch = kw.cluster_watch({kw.RAYJOB_NAME_ENV: "rayjob-abc", kw.RAYJOB_NAMESPACE_ENV: "ns",
                              "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert isinstance(watch, kw.ClusterWatch) and (watch.namespace, watch.rayjob) == ("ns", "rayjob-abc")
    assert watch.get.__self__.base_url == "https://10.0.0.1:443"
    assert isinstance(kw.cluster_watch({kw.RAYJOB_NAME_ENV: "rayjob-abc"}), kw.NoWatch)


# ---- submission: once --------------------------------------------------------------------------------------

def test_a_retried_pod_does_not_submit_the_job_again():
    clock = FakeClock()
    head = FakeHead(clock, run_s=50, already_submitted=True)
    code, _ = run_submitter(head, clock)
    assert code == exit_codes.OK and head.submissions == 0


def test_an_unanswered_submission_is_checked_before_submitting_again():
    clock = FakeClock()
    head = FakeHead(clock, run_s=50, answer_submit=False)
    code, _ = run_submitter(head, clock)
    assert code == exit_codes.OK and head.submissions == 1


def test_a_submission_refused_because_another_pod_got_there_first_watches_that_job():
    class Raced(FakeHead):
        def submit(self, *args):
            self.submitted_at = self.clock.t     # the other pod's submission
            raise RuntimeError("Request failed with status code 400: Job with submission_id rayjob-abc already "
                               "exists.")

    clock = FakeClock()
    head = Raced(clock, run_s=50)
    code, exited_at = run_submitter(head, clock)
    assert code == exit_codes.OK and exited_at >= 50


def test_the_head_not_reachable_at_start_is_waited_for_then_given_up():
    clock = FakeClock()
    head = FakeHead(clock, run_s=50, outages=[(0.0, 45.0)])
    assert run_submitter(head, clock)[0] == exit_codes.OK and head.submissions == 1
    clock = FakeClock()
    head = FakeHead(clock, run_s=50, outages=[(0.0, 1e9)])
    code, exited_at = run_submitter(head, clock)
    assert code == sub.EXIT_GAVE_UP and exited_at <= sub.START_WAIT_S and head.submissions == 0


def test_a_job_the_cluster_forgot_is_given_up():
    clock = FakeClock()
    head = FakeHead(clock, run_s=5000, forget_at=200.0)
    code, exited_at = run_submitter(head, clock)
    assert code == sub.EXIT_GAVE_UP and exited_at < 200 + sub.POLL_S + 1


def test_a_refused_submission_ends_in_one_line():
    class Refusing(FakeHead):
        def submit(self, *args):
            raise RuntimeError("Request failed with status code 400: runtime_env\n is invalid.")

    clock = FakeClock()
    code, _ = run_submitter(Refusing(clock, run_s=1), clock)
    assert code == sub.EXIT_GAVE_UP


# ---- the log: a side stream that survives drops ------------------------------------------------------------

class DroppingTail:
    """The job's tail endpoint: every connection starts at the top of the log (ray dashboard job_head
    tail_job_logs), the first two drop part-way as a closed WebSocket does (sdk.py tail_job_logs raises
    RuntimeError "WebSocket connection closed unexpectedly")."""

    LOG = ["step 1\n", "step 2\n", "step 3\n", "step 4\n", "done\n"]

    def __init__(self, follower_done: threading.Event):
        self.connections = 0
        self.done = follower_done

    def tail(self, job_id: str):
        self.connections += 1
        connection = self.connections

        async def stream():
            available = {1: 2, 2: 3}.get(connection, len(self.LOG))
            for chunk in self.LOG[:available]:
                yield chunk
                await asyncio.sleep(0)
            if connection < 3:
                raise RuntimeError("WebSocket connection closed unexpectedly with close code 1006")
            self.done.set()   # the whole log was delivered: the job has ended
        return stream()


def test_the_log_is_followed_across_dropped_streams_each_line_once():
    out = io.StringIO()
    follower = LogFollower(api=None, job_id="rayjob-abc", out=out, first_pause_s=0.01, max_pause_s=0.02)
    follower.api = DroppingTail(follower.done)
    thread = threading.Thread(target=follower.follow, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert out.getvalue() == "".join(DroppingTail.LOG)
    # Two drops, the stream that reached the end, and the last pass the follower makes once the job has ended.
    assert follower.api.connections == 4


def test_the_run_ends_on_the_status_even_while_the_log_stream_is_down():
    class NoLog:
        def tail(self, job_id):
            raise Unreachable("ConnectionError: connection refused")

    clock = FakeClock()
    head = FakeHead(clock, run_s=100)
    follower = LogFollower(NoLog(), "rayjob-abc", out=io.StringIO(), first_pause_s=0.01, max_pause_s=0.01)
    code = Submitter(head, "rayjob-abc", "python -m x", {}, clock=clock).run(follower)
    assert code == exit_codes.OK and follower.done.is_set()


# ---- the client wrapper: errors sorted, no request hangs forever -------------------------------------------

@pytest.mark.parametrize("error, kind", [
    (RuntimeError("Request failed with status code 404: Job raysubmit_x does not exist."), NotFound),
    (RuntimeError("Request failed with status code 503: Service Unavailable."), Unreachable),
    (requests.exceptions.ConnectionError("Connection aborted"), Unreachable),
    (requests.exceptions.ReadTimeout("read timed out"), Unreachable),
    (ConnectionError("Failed to connect to Ray at address: http://head:8265."), Unreachable),
    (RuntimeError("Request failed with status code 400: bad runtime_env."), RuntimeError),
    (FileNotFoundError("/opt/tpu-multislice"), FileNotFoundError),
])
def test_errors_are_sorted_into_retry_or_refusal(error, kind):
    assert type(sub._sorted_error(error)) is kind


def test_a_request_that_hangs_counts_as_unreachable():
    api = RayJobApi("head:8265", timeout_s=0.2)
    assert api.address == "http://head:8265"
    gate = threading.Event()
    with pytest.raises(Unreachable):
        api._call(lambda: gate.wait(5))
    gate.set()


def test_missing_address_or_id_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.delenv("RAY_DASHBOARD_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_JOB_SUBMISSION_ID", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        sub.main(["--entrypoint", "python -m x"])
    assert exit_info.value.code == exit_codes.CONFIG_ERROR
    # One refusal, laid out within 100 columns (core/cli_errors.fit_columns): its first line names the command.
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("python -m trainer.submitter: --address and --submission-id")
    assert all(line.startswith("    ") for line in lines[1:]) and all(len(line) <= 100 for line in lines)
