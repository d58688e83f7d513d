"""What a Spot preemption of one slice costs the JobSet's restart budget, in every order the two slices' Jobs fail.

At a notice JAX's preemption sync makes every host of every slice save at the same step and leave: the preempted
slice's pods carry DisruptionTarget (the kubelet's graceful node shutdown), the healthy slice's pods exit 143
(trainer/jobset_run.py, core.exit_codes.PREEMPTED) with no condition. Whichever Job fails first decides.

The controllers as their sources describe them:
- Job controller (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy): a failed
  pod is matched against the podFailurePolicy rules in order, the first match decides; FailJob fails the Job with
  reason PodFailurePolicy and the message "Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at
  index N" or "Container <c> for pod <ns>/<pod> failed with exit code <code> matching FailJob rule at index N"; no
  match counts toward backoffLimit (0 here: the Job fails BackoffLimitExceeded).
- JobSet controller v0.12.0 pkg/controllers/failure_policy.go: executeFailurePolicy runs when a reconcile finds a
  failed child Job; findFirstFailedPolicyRuleAndJob tries the rules in order and, for each, picks the failed Job
  it matches that failed earliest (LastTransitionTime of its Failed condition); no rule matching means the default
  RestartJobSet (defaultFailurePolicyRuleAction), which increments restartsCountTowardsMax
  (failurePolicyRecreateAll, shouldCountTowardsMax) and fails the JobSet once that reaches maxRestarts;
  RestartJobSetAndIgnoreMaxRestarts increments only restarts. After a restart, Jobs of the previous attempt
  (restarts label below status.restarts) are deleted, not read as failures (jobset_controller.go getChildJobs,
  ownedJobs.previous): a Job that fails after the restart was decided costs nothing more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from core import exit_codes
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads import failure_policy
from workloads.bundle import TrainerBundle
from workloads.jobset import spec as jobset_inputs

BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/smoke.py": "# stand-in\n"})


@dataclass
class Pod:
    exit_code: int
    disrupted: bool = False
    container: str = "maxtext"
    name: str = "pod-0"


def pod_failure(pod: Pod, policy: dict) -> tuple[str, str]:
    """The Job controller's (reason, message) for a Job whose only failed pod is `pod` (backoffLimit 0)."""
    for index, rule in enumerate(policy["rules"]):
        if "onPodConditions" in rule:
            if pod.disrupted and any(c["type"] == "DisruptionTarget" for c in rule["onPodConditions"]):
                return ("PodFailurePolicy",
                        f"Pod ns/{pod.name} has condition DisruptionTarget matching {rule['action']} rule at index "
                        f"{index}")
            continue
        codes = rule["onExitCodes"]
        if codes.get("containerName") not in (None, pod.container):
            continue
        if (pod.exit_code in codes["values"]) == (codes["operator"] == "In"):
            return ("PodFailurePolicy",
                    f"Container {pod.container} for pod ns/{pod.name} failed with exit code {pod.exit_code} "
                    f"matching {rule['action']} rule at index {index}")
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


@dataclass
class FailedJob:
    name: str
    replicated_job: str
    failed_at: int
    reason: str
    message: str


@dataclass
class JobSetStatus:
    restarts: int = 0
    restarts_count_towards_max: int = 0
    failed: str | None = None              # the JobSet's Failed reason, once terminal
    decided_by: list[str] = field(default_factory=list)


def _applies(rule: dict, job: FailedJob) -> bool:
    # failure_policy.go ruleIsApplicable: reason in onJobFailureReasons, any pattern regexp.MatchString (unanchored),
    # replicated job in targetReplicatedJobs (each only when set).
    if rule.get("onJobFailureReasons") and job.reason not in rule["onJobFailureReasons"]:
        return False
    patterns = rule.get("onJobFailureMessagePatterns")
    if patterns and not any(re.search(pattern, job.message) for pattern in patterns):
        return False
    return not rule.get("targetReplicatedJobs") or job.replicated_job in rule["targetReplicatedJobs"]


def execute_failure_policy(policy: dict, failed: list[FailedJob], status: JobSetStatus) -> None:
    """failure_policy.go executeFailurePolicy over the failed Jobs of the current attempt."""
    chosen_rule = None
    for rule in policy.get("rules", []):
        matching = [job for job in failed if _applies(rule, job)]
        if matching:
            chosen_rule = rule
            break
    action = chosen_rule["action"] if chosen_rule else "RestartJobSet"
    status.decided_by.append(chosen_rule["name"] if chosen_rule else "default")
    if action == "FailJobSet":
        status.failed = "FailedByFailurePolicy"
    elif action == "RestartJobSet":
        if status.restarts_count_towards_max >= policy["maxRestarts"]:
            status.failed = "ReachedMaxRestarts"
            return
        status.restarts += 1
        status.restarts_count_towards_max += 1
    elif action == "RestartJobSetAndIgnoreMaxRestarts":
        status.restarts += 1
    else:
        raise AssertionError(f"action {action} not played here")


def run_attempt(jobset: dict, slice_pods: dict[int, tuple[Pod, int]], status: JobSetStatus,
                reconcile_at: list[int]) -> None:
    """One attempt: slice index -> (its failed pod, when its Job fails); the JobSet reconciles at the given times
    and acts on the Jobs failed by then; once it restarted, later failures belong to the previous attempt."""
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    failures = []
    for index, (pod, when) in slice_pods.items():
        reason, message = pod_failure(pod, job_spec["podFailurePolicy"])
        failures.append(FailedJob(f"js-slice-{index}", replicated["name"], when, reason, message))
    attempt = status.restarts
    for now in sorted(reconcile_at):
        if status.restarts != attempt or status.failed:
            return
        failed = [job for job in failures if job.failed_at <= now]
        if failed:
            execute_failure_policy(jobset["spec"]["failurePolicy"], failed, status)


@pytest.fixture(scope="module")
def training_jobset() -> dict:
    return jobset_inputs.jobset_objects(build(load_stack_config("jobset", REPO)), BUNDLE)["jobset"]


def without_notice_rule(jobset: dict) -> dict:
    """The same JobSet as the stack built it before the notice rule (pod rules 0-1, JobSet rules 0-1)."""
    import copy
    old = copy.deepcopy(jobset)
    (replicated,) = old["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    job["podFailurePolicy"] = failure_policy.pod_failure_policy("maxtext")
    old["spec"]["failurePolicy"]["rules"] = failure_policy.jobset_rules(exit_codes=True)
    return old


PREEMPTED = Pod(exit_codes.PREEMPTED, disrupted=True)       # the slice whose VMs got the notice
PREEMPTED_KILLED = Pod(exit_codes.KILLED, disrupted=True)   # ... whose save outlived the grace period
HEALTHY_SAVED = Pod(exit_codes.PREEMPTED)                    # the other slice: saved at the sync point and left

# (label, {slice: (pod, failure time)}, reconcile times)
ORDERS = [
    ("healthy-slice-first", {0: (PREEMPTED, 20), 1: (HEALTHY_SAVED, 10)}, [10, 20]),
    ("preempted-slice-first", {0: (PREEMPTED, 10), 1: (HEALTHY_SAVED, 20)}, [10, 20]),
    ("both-in-one-reconcile", {0: (PREEMPTED, 10), 1: (HEALTHY_SAVED, 11)}, [15]),
    ("killed-at-grace-end-healthy-first", {0: (PREEMPTED_KILLED, 30), 1: (HEALTHY_SAVED, 10)}, [10, 30]),
]


@pytest.mark.parametrize("label, pods, reconciles", ORDERS, ids=[o[0] for o in ORDERS])
def test_a_preemption_never_counts_toward_max_restarts_in_any_order(training_jobset, label, pods, reconciles):
    status = JobSetStatus()
    run_attempt(training_jobset, pods, status, reconciles)
    assert status.restarts == 1 and status.restarts_count_towards_max == 0 and status.failed is None, status


def test_without_the_notice_rule_the_healthy_slice_failing_first_is_counted(training_jobset):
    """The fault the notice rule removes: with DisruptionTarget the only free restart, the healthy slice's exit 143
    is BackoffLimitExceeded, no rule matches, and RestartJobSet counts it."""
    status = JobSetStatus()
    run_attempt(without_notice_rule(training_jobset), dict(ORDERS[0][1]), status, ORDERS[0][2])
    assert status.restarts_count_towards_max == 1 and status.decided_by == ["default"]
    # And the other order was free even then: the order alone decided.
    status = JobSetStatus()
    run_attempt(without_notice_rule(training_jobset), dict(ORDERS[1][1]), status, ORDERS[1][2])
    assert status.restarts_count_towards_max == 0


def test_a_jobset_preempted_more_often_than_max_restarts_keeps_running(training_jobset):
    status = JobSetStatus()
    for attempt in range(training_jobset["spec"]["failurePolicy"]["maxRestarts"] + 5):
        order = ORDERS[attempt % 2]
        run_attempt(training_jobset, dict(order[1]), status, order[2])
    assert status.failed is None and status.restarts_count_towards_max == 0


def test_a_not_retryable_exit_still_ends_the_jobset_when_the_other_slice_left_at_the_notice(training_jobset):
    """Slice 0 hits a data error while slice 1 exits 143: rules are tried in order (NotRetryableExit before the
    notice rule), so the run ends rather than restarting into the same error."""
    status = JobSetStatus()
    run_attempt(training_jobset, {0: (Pod(exit_codes.DATA_ERROR), 20), 1: (HEALTHY_SAVED, 10)}, status, [20])
    assert status.failed == "FailedByFailurePolicy"


def test_ordinary_failures_still_exhaust_max_restarts(training_jobset):
    status = JobSetStatus()
    for _ in range(training_jobset["spec"]["failurePolicy"]["maxRestarts"] + 1):
        run_attempt(training_jobset, {0: (Pod(exit_codes.RUNTIME_FAILURE), 10)}, status, [10])
    assert status.failed == "ReachedMaxRestarts"


def test_each_jobset_rule_matches_only_its_own_pod_rule_message():
    rules = {rule["name"]: rule for rule in failure_policy.jobset_rules(exit_codes=True, notice_exit=True)}
    policy = failure_policy.pod_failure_policy("maxtext", notice_exit=True)
    messages = {
        failure_policy.DISRUPTED_NAME: pod_failure(Pod(exit_codes.PREEMPTED, disrupted=True), policy)[1],
        failure_policy.NOT_RETRYABLE_NAME: pod_failure(Pod(exit_codes.CONFIG_ERROR), policy)[1],
        failure_policy.NOTICE_EXIT_NAME: pod_failure(Pod(exit_codes.PREEMPTED), policy)[1],
    }
    for name, rule in rules.items():
        for source, message in messages.items():
            matched = any(re.search(p, message) for p in rule["onJobFailureMessagePatterns"])
            assert matched == (name == source), (name, message)
