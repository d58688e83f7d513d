"""A slice that comes up minutes after the other costs waiting, never a counted JobSet restart.

The rules played (sources at the pinned versions):
- Kueue v0.19.2 waitForPodsReady (apis/config/v1beta2/configuration_types.go WaitForPodsReady, defaults.go: on by
  default, recoveryTimeout = timeout; pkg/controller/jobs/jobset/jobset_controller.go PodsReady: every replicated
  Job's Jobs ready): a workload not PodsReady `timeout` after admission is evicted, the JobSet suspended (its pods
  removed, no Job failure) and requeued.
- JAX (jax/_src/distributed.py initialize, `initialization_timeout`, default 300 s): each process waits in
  initialize for every process; when the wait runs out it raises, trainer.smoke exits 1 under `set -e`, the pod
  fails, the Job fails BackoffLimitExceeded (backoffLimit 0, no podFailurePolicy rule matches exit 1) and JobSet's
  default RestartJobSet counts it (pkg/controllers/failure_policy.go).
"""
from __future__ import annotations

import re

import pytest
import yaml

from core import slice_wait
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.bundle import TrainerBundle
from workloads.controllers import kueue_values
from workloads.jobset import spec as jobset_inputs

BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/smoke.py": "# stand-in\n"})


def _duration_s(text: str) -> int:
    match = re.fullmatch(r"(\d+)s", text)
    assert match, text
    return int(match.group(1))


@pytest.fixture(scope="module")
def rendered() -> dict:
    """The waits as the stack renders them: Kueue's timeout, the smoke test's and MaxText's init timeouts."""
    config = build(load_stack_config("jobset", REPO))
    kueue = yaml.safe_load(kueue_values(config)["managerConfig"]["controllerManagerConfigYaml"])
    jobset = jobset_inputs.jobset_objects(config, BUNDLE)["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    smoke = re.search(r"trainer\.smoke .*--init-timeout (\d+)", container["command"][2])
    (maxtext,) = [a for a in container["args"] if a.startswith("jax_distributed_initialization_timeout=")]
    ready = kueue["waitForPodsReady"]
    return {"pods_ready": _duration_s(ready["timeout"]),
            "recovery": _duration_s(ready.get("recoveryTimeout", ready["timeout"])),
            "smoke_init": int(smoke.group(1)), "maxtext_init": int(maxtext.split("=", 1)[1])}


def outcome(slice_ready: list[float], join_after_ready: list[float], pods_ready_timeout: float,
            init_timeout: float) -> str:
    """What ends first after admission (t=0): every process joined ('trains'), Kueue's eviction ('waits': the
    JobSet is suspended and requeued, nothing counted), or the first process's JAX wait ('counted restart')."""
    joins = [ready + join for ready, join in zip(slice_ready, join_after_ready)]
    all_joined = max(joins)
    first_gives_up = min(joins) + init_timeout
    kueue_evicts = pods_ready_timeout if max(slice_ready) > pods_ready_timeout else float("inf")
    if all_joined <= first_gives_up and all_joined <= kueue_evicts:
        return "trains"
    return "waits" if kueue_evicts < first_gives_up else "counted restart"


def _timelines(limit: float):
    steps = [0, 30, 300, 600, 900, 1079, 1080, 1081, 1500, 3000, 7200]
    for late in [s for s in steps if s <= limit] + [limit * 2]:
        for first_join in (0, slice_wait.READY_TO_JOIN_S / 2):
            for late_join in (0, slice_wait.READY_TO_JOIN_S):
                yield [0.0, float(late)], [float(first_join), float(late_join)]


def test_a_late_slice_never_costs_a_counted_restart(rendered):
    assert rendered["smoke_init"] == rendered["maxtext_init"]
    for timeout in (rendered["pods_ready"], rendered["recovery"]):
        for ready, joins in _timelines(7200):
            result = outcome(ready, joins, timeout, rendered["smoke_init"])
            assert result != "counted restart", (ready, joins)
            # A slice inside Kueue's timeout is waited for and the run trains.
            if max(ready) <= timeout:
                assert result == "trains", (ready, joins)


def test_with_jaxs_default_wait_a_slice_six_minutes_late_was_a_counted_restart(rendered):
    """What the stack did before: JAX's 300 s against Kueue's 30 min default."""
    assert outcome([0, 360], [60, 60], pods_ready_timeout=1800, init_timeout=300) == "counted restart"
    assert outcome([0, 360], [60, 60], rendered["pods_ready"], rendered["smoke_init"]) == "trains"


def test_the_wait_is_sized_from_the_slice_start_up_the_plan_assumes(rendered):
    from preview.timings import TPU_NODE_POOL
    assert TPU_NODE_POOL.create_s == slice_wait.SLICE_START_S
    assert rendered["pods_ready"] == slice_wait.PODS_READY_TIMEOUT_S > slice_wait.SLICE_START_S
    assert rendered["smoke_init"] >= rendered["pods_ready"] + slice_wait.READY_TO_JOIN_S
