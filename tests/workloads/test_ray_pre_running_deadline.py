"""A RayJob that waits for capacity gives up after rayPreRunningDeadlineSeconds instead of waiting (and billing its
head and the slices that did arrive) forever.

The rule played here is KubeRay v1.7.0's (ray-project/kuberay, tag v1.7.0):
- ray-operator/controllers/ray/rayjob_controller.go `checkPreRunningDeadlineAndUpdateStatusIfNeeded`: in the
  Initializing and Waiting states, when `spec.preRunningDeadlineSeconds` is set and `time.Now()` is not before
  `status.startTime + preRunningDeadlineSeconds`, the RayJob turns Failed with reason PreRunningDeadlineExceeded;
  unset, there is no deadline. Initializing is left for Running only once the RayCluster's state is Ready (same file,
  `Reconcile`, case JobDeploymentStatusInitializing), so the deadline bounds the wait for the cluster.
- same file, case JobDeploymentStatusFailed: with `shutdownAfterJobFinishes` the job's RayCluster is deleted
  (`handleShutdownAfterJobFinishes`), so its pods stop billing.
- ray-operator/apis/ray/v1/rayjob_types.go: `PreRunningDeadlineSeconds *int32`, `+kubebuilder:validation:Minimum=1`;
  ray-operator/controllers/ray/utils/validation.go `ValidateRayJobSpec`: "preRunningDeadlineSeconds must be a
  positive integer".
- ray-operator/config/crd/bases/ray.io_rayjobs.yaml: the field is absent at v1.5.2, present at v1.6.0.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from infra.config import build
from infra.config.schema import DEFAULT_RAY_PRE_RUNNING_DEADLINE_S
from preview.harness import bundled_crd_spec
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.ray.component import ray_objects
from workloads.ray.served_schema import unserved_problem

INT32_MAX = 2**31 - 1


@dataclass
class RayJobState:
    deployment: str = "Initializing"
    reason: str = ""


def kuberay_reconcile(spec: dict, state: RayJobState, seconds_since_start: float, cluster_ready: bool) -> RayJobState:
    """One pass of KubeRay v1.7.0's RayJob reconcile through the states before Running, as far as the deadline and
    the Ready gate go (rayjob_controller.go `Reconcile` and `checkPreRunningDeadlineAndUpdateStatusIfNeeded`; the
    activeDeadlineSeconds check before it is played the same way)."""
    state = copy.copy(state)
    if state.deployment not in ("Initializing", "Waiting"):
        return state
    active = spec.get("activeDeadlineSeconds")
    if state.deployment == "Initializing" and active is not None and not seconds_since_start < active:
        return RayJobState("Failed", "DeadlineExceeded")
    deadline = spec.get("preRunningDeadlineSeconds")
    if deadline is not None and not seconds_since_start < deadline:
        return RayJobState("Failed", "PreRunningDeadlineExceeded")
    if state.deployment == "Initializing" and cluster_ready and spec.get("submissionMode") == "K8sJobMode":
        return RayJobState("Running")
    return state


def kuberay_validate(spec: dict) -> str | None:
    """validation.go `ValidateRayJobSpec` on the field, and the CRD's int32 minimum 1."""
    deadline = spec.get("preRunningDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= INT32_MAX:
        return "The RayJob spec is invalid: preRunningDeadlineSeconds must be a positive integer"
    return None


def ray_job(raw: dict) -> dict:
    return ray_objects(build(raw), load_bundle())["ray-job"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_ray_stacks_bound_the_wait_for_their_cluster(stack):
    spec = ray_job(load_stack_config(stack, REPO))["spec"]
    assert spec["preRunningDeadlineSeconds"] == DEFAULT_RAY_PRE_RUNNING_DEADLINE_S
    assert kuberay_validate(spec) is None
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 0


@pytest.mark.parametrize("capacity", ["spot", "flex-start"])
def test_a_job_whose_cluster_never_comes_up_fails_at_the_deadline(capacity):
    spec = ray_job({**MINIMAL, "capacity": capacity, "rayPreRunningDeadlineSeconds": 900})["spec"]
    # Spot and flex-start have no activeDeadlineSeconds (workloads/ray/deadline.py): this is their only bound.
    assert "activeDeadlineSeconds" not in spec
    state = RayJobState()
    state = kuberay_reconcile(spec, state, 899.9, cluster_ready=False)
    assert state == RayJobState("Initializing")
    state = kuberay_reconcile(spec, state, 900, cluster_ready=False)
    assert state == RayJobState("Failed", "PreRunningDeadlineExceeded")


def test_a_job_whose_cluster_comes_up_in_time_runs_past_the_deadline():
    spec = ray_job({**MINIMAL, "capacity": "spot", "rayPreRunningDeadlineSeconds": 900})["spec"]
    state = kuberay_reconcile(spec, RayJobState(), 600, cluster_ready=True)
    assert state == RayJobState("Running")
    # Running is past the pre-running check: a long run is never ended by it.
    assert kuberay_reconcile(spec, state, 10 * 3600, cluster_ready=True) == RayJobState("Running")


def test_zero_leaves_the_field_out_and_the_job_waits_without_limit():
    spec = ray_job({**MINIMAL, "capacity": "spot", "rayPreRunningDeadlineSeconds": 0})["spec"]
    assert "preRunningDeadlineSeconds" not in spec and kuberay_validate(spec) is None
    assert kuberay_reconcile(spec, RayJobState(), 30 * 24 * 3600, cluster_ready=False) == RayJobState("Initializing")


def test_a_kuberay_without_the_field_is_refused_naming_the_release_that_has_it():
    job = ray_job(load_stack_config("dev", REPO))
    crd = copy.deepcopy(bundled_crd_spec("rayjobs.ray.io"))
    assert crd is not None, "the shared schema bundle (kuberay/ray.io_rayjobs.yaml) is needed"
    for version in crd["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("preRunningDeadlineSeconds", None)
    problem = unserved_problem(job, crd)
    assert problem is not None and "spec.preRunningDeadlineSeconds" in problem and "KubeRay >= 1.6.0" in problem


def test_the_plan_shows_the_deadline():
    from preview.costs import cost_summary
    config = build({**MINIMAL, "capacity": "spot", "rayPreRunningDeadlineSeconds": 1800})
    notes = " ".join(cost_summary([], config).notes)
    assert "after 1800 s (30 min)" in notes and "capacityWaitSeconds" in notes
    # What happens then, as the controller does it: the RayCluster goes with its pods (shutdownAfterJobFinishes) and
    # backoffLimit 0 does not retry it.
    assert "RayCluster is deleted with every pod that did come up" in notes and "nothing retries it" in notes
    notes = " ".join(cost_summary([], build({**MINIMAL, "rayPreRunningDeadlineSeconds": 0})).notes)
    assert "no limit (capacityWaitSeconds=0)" in notes


# A TPU quota request that a person reviews, granted the same working day: the allowance the default is sized for
# (an assumption the plan lists, infra/config/schema.py DEFAULT_RAY_PRE_RUNNING_DEADLINE_S).
QUOTA_GRANTED_AFTER_S = 4 * 3600


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_first_run_waiting_for_its_quota_grant_starts_when_it_comes(stack):
    """The committed stack, a new project: no TPU quota at `pulumi up`, granted hours later. The job must still
    be waiting then, not failed at its first hour as with the old default of 3600 s."""
    spec = ray_objects(build(load_stack_config(stack, REPO)), load_bundle())["ray-job"]["spec"]
    state = RayJobState()
    for minute in range(0, QUOTA_GRANTED_AFTER_S // 60 + 1):
        state = kuberay_reconcile(spec, state, minute * 60, cluster_ready=minute * 60 >= QUOTA_GRANTED_AFTER_S)
    assert state == RayJobState("Running"), state


def test_the_plan_says_how_to_start_a_job_that_gave_up_and_that_the_wait_is_an_allowance():
    from preview.costs import cost_summary
    from workloads.backends import backend_for
    config = build(load_stack_config("prod", REPO))
    notes = " ".join(cost_summary([], config).notes)
    assert "`relaunchCommand` starts it again" in notes
    # prod is fixed at 2 slices: one may be up, idle, while the job waits for the other.
    assert "at worst 1 of the 2 slices" in notes
    assumptions = " ".join(backend_for(config).assumptions(config))
    assert "first wait for capacity" in assumptions and "assumed" in assumptions



@pytest.mark.parametrize("given", [{"capacityWaitSeconds": 1800}, {"rayPreRunningDeadlineSeconds": 1800},
                                   {"capacityWaitSeconds": 1800, "rayPreRunningDeadlineSeconds": 1800}])
def test_one_key_bounds_the_first_wait_and_every_later_one(given):
    """capacityWaitSeconds feeds KubeRay's preRunningDeadlineSeconds (the first wait) and the trainer's
    --capacity-wait (every later wait with no worker group running, trainer/watchdog.py); the older key
    rayPreRunningDeadlineSeconds alone still sets both."""
    from workloads.ray import spec as ray_spec

    config = build({**MINIMAL, "capacity": "spot", **given})
    spec = ray_objects(config, load_bundle())["ray-job"]["spec"]
    assert spec["preRunningDeadlineSeconds"] == 1800
    command = ray_spec.entrypoint(config)
    assert command[command.index("--capacity-wait") + 1] == "1800"
    from preview.costs import cost_summary

    notes = " ".join(cost_summary([], config).notes)
    away = "slice below elasticMinSlices" if config.workload.plan.elastic else "reclaimed slice"
    assert f"a later wait (a {away} away) lasts at most the same 1800 s" in notes


def test_both_keys_that_differ_are_refused_in_one_line():
    from infra.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        build({**MINIMAL, "capacityWaitSeconds": 1800, "rayPreRunningDeadlineSeconds": 900})
    text = " ".join(str(refused.value).split())
    assert ("tpu-multislice:rayPreRunningDeadlineSeconds=900 and tpu-multislice:capacityWaitSeconds=1800 differ"
            in text)


@pytest.mark.parametrize("capacity", ["on-demand", "reservation"])
def test_the_first_wait_never_takes_the_run_s_own_time(capacity):
    """Issue 43 item 5: KubeRay counts activeDeadlineSeconds and preRunningDeadlineSeconds from the same
    Status.StartTime (rayjob_controller.go checkActiveDeadlineAndUpdateStatusIfNeeded,
    checkPreRunningDeadlineAndUpdateStatusIfNeeded). On prod the active deadline (17210 s) was shorter than the
    pre-running one (21600 s): the whole first wait could not happen, and every minute of it was the run's. The
    active deadline is now the pre-running one plus the run's own time: a job whose cluster comes up at the last
    second of its first wait still has all of its own time."""
    from core.preemption import save_estimate
    from core.run_time import run_deadline_seconds

    extra = {"reservationName": "r"} if capacity == "reservation" else {}
    config = build({**MINIMAL, "capacity": capacity, "capacityWaitSeconds": 21600, **extra})
    spec = ray_job({**MINIMAL, "capacity": capacity, "capacityWaitSeconds": 21600, **extra})["spec"]
    workload = config.workload
    own = run_deadline_seconds(workload.plan, steps=workload.train_steps, attempts=config.ray.max_failures + 1,
                               seconds_per_save=save_estimate(workload.plan).seconds,
                               checkpoint_period=workload.checkpoint_period)
    assert spec["activeDeadlineSeconds"] == spec["preRunningDeadlineSeconds"] + own
    state = kuberay_reconcile(spec, RayJobState(), 21599, cluster_ready=True)    # up at the end of the wait
    assert state == RayJobState("Running")
    assert spec["activeDeadlineSeconds"] - 21599 > own                           # the run keeps its own time
