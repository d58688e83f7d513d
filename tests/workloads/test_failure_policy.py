"""Fail fast on what a retry cannot fix, restart on what it can: the JobSet failure policies (JobSet and Pathways
backends) and the RayJob's retries and deadline, against the controllers' own rules.

Sources: JobSet v0.12.0 pkg/controllers/failure_policy.go (rules in order, first match wins; a rule applies when
the Job's failure reason is in onJobFailureReasons and any onJobFailureMessagePatterns regexp matches
(regexp.MatchString: unanchored); no match: RestartJobSet, counted); Kubernetes pkg/controller/job/
pod_failure_policy.go (rules in order; FailJob messages "Pod %s/%s has condition %v matching %v rule at index %d"
and "Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d"; a pod no rule matches
counts toward backoffLimit) and "Handling retriable and non-retriable pod failures with Pod failure policy"
(https://kubernetes.io/docs/tasks/job/pod-failure-policy/: the pod template's restartPolicy must be Never);
KubeRay v1.7.0 rayjob_types.go / rayjob_controller.go (submitter backoffLimit default 2; activeDeadlineSeconds
counts from the job's start and fails it with DeadlineExceeded)."""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import pytest

from core import exit_codes
from core.planner import PlanRequest, plan
from core.recipes import RECIPES
from core.run_time import run_deadline_seconds
from infra.config import build
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads import failure_policy
from workloads.bundle import TrainerBundle
from workloads.jobset import spec as jobset_inputs
from workloads.pathways import manifests as pathways_manifests
from workloads.pathways.component import pathways_objects
from workloads.ray.deadline import job_deadline_seconds

BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/smoke.py": "# stand-in\n"})


# ---- the two controllers, as their sources describe them ------------------------------------------------

@dataclass
class FailedPod:
    namespace: str = "ns"
    name: str = "pod-0"
    container: str = "maxtext"
    exit_code: int = 1
    disrupted: bool = False          # carries condition DisruptionTarget=True


def job_failure(pod: FailedPod, policy: dict, backoff_limit: int = 0) -> tuple[str, str]:
    """(reason, message) of the Job this pod fails, per the Job controller's podFailurePolicy evaluation."""
    for index, rule in enumerate(policy["rules"]):
        if "onPodConditions" in rule:
            matched = pod.disrupted and any(c["type"] == "DisruptionTarget" and c.get("status", "True") == "True"
                                            for c in rule["onPodConditions"])
            message = f"Pod {pod.namespace}/{pod.name} has condition DisruptionTarget matching FailJob rule at index {index}"
        else:
            codes = rule["onExitCodes"]
            matched = (codes.get("containerName") in (None, pod.container)
                       and (pod.exit_code in codes["values"]) == (codes["operator"] == "In"))
            message = (f"Container {pod.container} for pod {pod.namespace}/{pod.name} failed with exit code "
                       f"{pod.exit_code} matching FailJob rule at index {index}")
        if matched:
            assert rule["action"] == "FailJob"
            return "PodFailurePolicy", message
    assert backoff_limit == 0
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(rules: list[dict], replicated_job: str, reason: str, message: str) -> str:
    for rule in rules:
        if rule.get("targetReplicatedJobs") and replicated_job not in rule["targetReplicatedJobs"]:
            continue
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        patterns = rule.get("onJobFailureMessagePatterns")
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return rule["action"]
    return "RestartJobSet"


# ---- JobSet backend -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def training_jobset() -> dict:
    config = build(load_stack_config("jobset", REPO))
    return jobset_inputs.jobset_objects(config, BUNDLE)["jobset"]


def _slice_job(jobset: dict) -> tuple[str, dict]:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    return replicated["name"], replicated["template"]["spec"]


@pytest.mark.parametrize("pod, expected", [
    (FailedPod(disrupted=True, exit_code=exit_codes.PREEMPTED), "RestartJobSetAndIgnoreMaxRestarts"),
    (FailedPod(disrupted=True, exit_code=exit_codes.KILLED), "RestartJobSetAndIgnoreMaxRestarts"),
    # A preempted pod whose trainer was still in the smoke test: the preemption decides, not the code.
    (FailedPod(disrupted=True, exit_code=exit_codes.SMOKE_FAILED), "RestartJobSetAndIgnoreMaxRestarts"),
    (FailedPod(exit_code=exit_codes.SMOKE_FAILED), "FailJobSet"),
    (FailedPod(exit_code=exit_codes.CONFIG_ERROR), "FailJobSet"),
    (FailedPod(exit_code=exit_codes.IMPORT_ERROR), "FailJobSet"),
    (FailedPod(exit_code=exit_codes.DATA_ERROR), "FailJobSet"),
    # Host 0 found N restarts in a row without a newer checkpoint (trainer/jobset_attempts.py): the run ends.
    (FailedPod(exit_code=exit_codes.INTERRUPTED_WITHOUT_PROGRESS), "FailJobSet"),
    (FailedPod(exit_code=exit_codes.RUNTIME_FAILURE), "RestartJobSet"),
    (FailedPod(exit_code=exit_codes.KILLED), "RestartJobSet"),
    # The trainer left at a notice the kubelet did not mark (no DisruptionTarget): the slice that saved at another
    # slice's notice (JAX's preemption sync); free too (tests/workloads/test_jobset_restarts.py plays the orders).
    (FailedPod(exit_code=exit_codes.PREEMPTED), "RestartJobSetAndIgnoreMaxRestarts"),
], ids=lambda v: v if isinstance(v, str) else f"exit{v.exit_code}{'-disrupted' if v.disrupted else ''}")
def test_jobset_restarts_preemptions_free_and_fails_at_once_on_what_a_retry_cannot_fix(training_jobset, pod,
                                                                                        expected):
    name, job = _slice_job(training_jobset)
    reason, message = job_failure(pod, job["podFailurePolicy"], job["backoffLimit"])
    action = jobset_action(training_jobset["spec"]["failurePolicy"]["rules"], name, reason, message)
    assert action == expected, (reason, message)


def test_every_not_retryable_code_and_only_those_fail_the_jobset(training_jobset):
    _, job = _slice_job(training_jobset)
    codes = job["podFailurePolicy"]["rules"][failure_policy.NOT_RETRYABLE_RULE]["onExitCodes"]
    assert codes["operator"] == "In" and set(codes["values"]) == exit_codes.NOT_RETRYABLE
    assert not set(codes["values"]) & exit_codes.RETRYABLE and 0 not in codes["values"]


def test_pod_failure_policy_names_a_container_of_a_never_restarting_pod(training_jobset):
    """Kubernetes refuses a podFailurePolicy unless the pod's restartPolicy is Never, and an onExitCodes
    containerName must be one of the pod's containers."""
    _, job = _slice_job(training_jobset)
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    names = {c["name"] for c in pod["containers"]}
    for rule in job["podFailurePolicy"]["rules"]:
        if "onExitCodes" in rule:
            assert rule["onExitCodes"]["containerName"] in names


def test_the_training_container_exits_with_the_codes_the_policy_reads(training_jobset):
    """MaxText alone exits 1 on every error and 0 at a preemption notice: the container runs it through
    trainer.jobset_run (shipped in the code bundle), and a MaxText that cannot be imported exits IMPORT_ERROR."""
    from workloads.bundle import load_bundle
    _, job = _slice_job(training_jobset)
    (container,) = job["template"]["spec"]["containers"]
    script = container["command"][2].splitlines()
    assert 'python -m trainer.jobset_run "$BASE_CONFIG" "$@" &' in script and script[-1] == 'exit "$status"'
    assert any(line.startswith("step=$!; wait") and f"|| exit {exit_codes.IMPORT_ERROR}" in line
               for line in script)
    assert "trainer/jobset_run.py" in load_bundle().files


def test_patterns_match_only_their_own_rules_message():
    preempted, not_retryable = failure_policy.jobset_rules(exit_codes=True)
    disrupted = "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0"
    exited = "Container maxtext for pod ns/p failed with exit code 5 matching FailJob rule at index 1"
    assert re.search(preempted["onJobFailureMessagePatterns"][0], disrupted)
    assert not re.search(preempted["onJobFailureMessagePatterns"][0], exited)
    assert re.search(not_retryable["onJobFailureMessagePatterns"][0], exited)
    assert not re.search(not_retryable["onJobFailureMessagePatterns"][0], disrupted)


def test_failure_policies_validate_against_the_jobset_crd(training_jobset, schemas_dir):
    config = build(load_stack_config("pathways", REPO))
    pathways = pathways_objects(config)["pathways-jobset"]
    def policy_errors(objects):
        return [f for f in validate_objects(objects, schemas_dir).errors if "ailurePolicy" in f.field_path]

    assert policy_errors([training_jobset, pathways]) == []
    # The same check catches a wrong action (the CRD's enum), so the empty list above means something.
    broken = copy.deepcopy(training_jobset)
    broken["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartJobSetForever"
    assert policy_errors([broken])


# ---- Pathways backend -----------------------------------------------------------------------------------

def test_pathways_restarts_an_evicted_head_free_and_ends_on_what_a_retry_cannot_fix():
    config = build(load_stack_config("pathways", REPO))
    jobset = pathways_objects(config)["pathways-jobset"]
    jobs = {r["name"]: r["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]}
    head = jobs[pathways_manifests.HEAD_JOB]
    assert head["template"]["spec"]["restartPolicy"] == "Never"
    rules = jobset["spec"]["failurePolicy"]["rules"]
    for pod, expected in ((FailedPod(container="maxtext", disrupted=True), "RestartJobSetAndIgnoreMaxRestarts"),
                          (FailedPod(container="maxtext", exit_code=exit_codes.CONFIG_ERROR), "FailJobSet"),
                          (FailedPod(container="maxtext", exit_code=exit_codes.DATA_ERROR), "FailJobSet"),
                          (FailedPod(container="maxtext", exit_code=exit_codes.RUNTIME_FAILURE), "RestartJobSet")):
        reason, message = job_failure(pod, head["podFailurePolicy"], head["backoffLimit"])
        assert jobset_action(rules, pathways_manifests.HEAD_JOB, reason, message) == expected
    # The head's MaxText exits with those codes: it runs through trainer.pathways_run.
    (trainer,) = [c for c in head["template"]["spec"]["containers"] if c["name"] == "maxtext"]
    assert "\npython3 -m trainer.pathways_run " in trainer["command"][2]
    # Worker pods restart in place (OnFailure), which a podFailurePolicy does not allow.
    worker = jobs[pathways_manifests.WORKER_JOB]
    assert worker["template"]["spec"]["restartPolicy"] == "OnFailure" and "podFailurePolicy" not in worker
    assert all(rule["targetReplicatedJobs"] == [pathways_manifests.HEAD_JOB] for rule in rules)


# ---- RayJob ---------------------------------------------------------------------------------------------

def _ray_job(raw: dict) -> dict:
    from workloads.bundle import load_bundle
    from workloads.ray.component import ray_objects
    return ray_objects(build(raw), load_bundle())["ray-job"]


def test_rayjob_retries_the_submitter_once_and_the_job_never():
    job = _ray_job(load_stack_config("prod", REPO))["spec"]
    assert job["submitterConfig"] == {"backoffLimit": 1} and job["backoffLimit"] == 0


def test_on_demand_rayjob_deadline_is_far_beyond_a_healthy_run():
    raw = load_stack_config("prod", REPO)
    config = build(raw)
    deadline = _ray_job(raw)["spec"]["activeDeadlineSeconds"]
    (recipe,) = [r for r in RECIPES if r.preset == config.workload.model]
    measured_step = float(re.search(r"seconds: ([0-9.]+)", recipe.measurement.quote).group(1))
    healthy = config.workload.train_steps * measured_step * (config.ray.max_failures + 1)
    assert deadline == job_deadline_seconds(config) and deadline > 4 * healthy + 3600


@pytest.mark.parametrize("overrides", [{"capacity": "spot"}, {"capacity": "flex-start"}, {"maxFailures": "-1"}])
def test_no_deadline_where_a_healthy_run_has_no_wall_clock_bound(overrides):
    job = _ray_job({**MINIMAL, **overrides})["spec"]
    assert "activeDeadlineSeconds" not in job


def test_run_deadline_grows_with_steps_and_attempts():
    planned = plan(PlanRequest(model="llama3-8b", generation="v6e", topology="4x4", slices=2))
    one = run_deadline_seconds(planned, steps=1000, attempts=1, seconds_per_save=30, checkpoint_period=50)
    assert run_deadline_seconds(planned, steps=2000, attempts=1, seconds_per_save=30, checkpoint_period=50) > one
    assert run_deadline_seconds(planned, steps=1000, attempts=4, seconds_per_save=30, checkpoint_period=50) > 3 * one
    assert run_deadline_seconds(planned, steps=10**9, attempts=10, seconds_per_save=30,
                                checkpoint_period=50) == 2**31 - 1   # the CRD's int32


def test_the_job_failure_message_the_rules_rely_on_is_listed_as_an_assumption():
    from preview.assumptions import assumptions
    for stack, listed in (("jobset", True), ("pathways", True), ("prod", False)):
        lines = assumptions(build(load_stack_config(stack, REPO)))
        assert any(line.startswith("JobSet failure policy:") for line in lines) is listed, stack
