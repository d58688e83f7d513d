"""The JobSet's pods carry what host 0 needs to count attempts without progress (trainer/jobset_attempts.py), and
the N they apply is the N the plan shows.

JobSet v0.12.0 sets the annotations read here on every pod of a child Job: `jobset.sigs.k8s.io/restart-attempt`
(pkg/constants/constants.go RestartsKey), `jobset.sigs.k8s.io/jobset-uid` and `jobset.sigs.k8s.io/job-index`
(api/jobset/v1alpha2/jobset_types.go JobSetUIDKey, JobIndexKey), in pkg/controllers/jobset_controller.go
labelAndAnnotateObject on the Job's pod template; the Job controller sets JOB_COMPLETION_INDEX on an Indexed Job's
pods (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode)."""
from __future__ import annotations

import re

import pytest

from core.run_bounds import attempts_without_progress
from infra.config import build
from preview.assumptions import assumptions
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from trainer import jobset_attempts
from workloads.bundle import TrainerBundle
from workloads.jobset import spec as jobset_inputs

BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/smoke.py": "# stand-in\n"})
ANNOTATIONS = {"jobset.sigs.k8s.io/restart-attempt", "jobset.sigs.k8s.io/jobset-uid",
               "jobset.sigs.k8s.io/job-index"}


@pytest.fixture(scope="module")
def config():
    return build(load_stack_config("jobset", REPO))


def _env(config) -> list[dict]:
    jobset = jobset_inputs.jobset_objects(config, BUNDLE)["jobset"]
    (replicated,) = jobset["spec"]["replicatedJobs"]
    (container,) = replicated["template"]["spec"]["template"]["spec"]["containers"]
    return container["env"]


def _as_host(env: list[dict], annotations: dict[str, str], completion_index: str) -> dict[str, str]:
    """The container's environment as the kubelet would resolve it on a pod with these annotations."""
    resolved = {"JOB_COMPLETION_INDEX": completion_index}
    for item in env:
        if "value" in item:
            resolved[item["name"]] = item["value"]
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            key = re.fullmatch(r"metadata\.annotations\['(.+)'\]", path).group(1)
            resolved[item["name"]] = annotations[key]
    return resolved


def test_host_0_reads_the_plan_s_n_and_jobset_s_restart_attempt(config):
    env = _env(config)
    fields = {item["valueFrom"]["fieldRef"]["fieldPath"] for item in env if "valueFrom" in item}
    assert {f"metadata.annotations['{key}']" for key in ANNOTATIONS} <= fields
    annotations = {"jobset.sigs.k8s.io/restart-attempt": "4", "jobset.sigs.k8s.io/jobset-uid": "u",
                   "jobset.sigs.k8s.io/job-index": "0"}
    settings = jobset_inputs.training_argv(config)[2:]
    attempt = jobset_attempts.pod_attempt(_as_host(env, annotations, "0"), settings)
    n = attempts_without_progress(config.workload.plan, config.workload.checkpoint_period)
    assert attempt is not None and (attempt.attempt, attempt.jobset_uid, attempt.limit) == (4, "u", n)
    assert attempt.run_directory.startswith("gs://") and attempt.run_directory.endswith(
        "/" + config.workload.run.run_name)
    assert jobset_attempts.pod_attempt(_as_host(env, annotations, "1"), settings) is None
    assert jobset_attempts.pod_attempt(
        _as_host(env, {**annotations, "jobset.sigs.k8s.io/job-index": "1"}, "0"), settings) is None


def test_the_plan_shows_the_n_the_pods_apply(config):
    n = next(item["value"] for item in _env(config) if item["name"] == jobset_attempts.ENV_LIMIT)
    (line,) = [line for line in assumptions(config) if line.startswith("JobSet run bounds")]
    assert line.startswith(f"JobSet run bounds: {n} restarts in a row that save no checkpoint newer")
    assert "exit 8" in line and re.search(r"at most ~\d+ min of every slice", line)
