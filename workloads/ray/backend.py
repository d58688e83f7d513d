"""The Ray backend: a RayJob that owns its RayCluster (KubeRay) and runs trainer.entrypoint, whose Ray Train
workers build MaxText's argv at run time (trainer.worker) from the run settings the entrypoint's flags carry."""
from __future__ import annotations

from typing import Any

from core.maxtext_args import maxtext_overrides, settings_of
from core.run_bounds import attempt_cost_seconds, limits_for
from core.tpu_env import libtpu_init_args
from infra.config import StackConfig
from infra.config.schema import DEFAULT_CAPACITY_WAIT_S
from workloads import install_cache
from workloads.backend import TrainingLaunch, WorkloadContext, relaunch_export
from workloads.failure_policy import OUT_OF_HBM_ASSUMPTION
from workloads.next_steps import RELAUNCH, FOLLOW_LOG, RUN_PODS, SMOKE_RESULT, TENSORBOARD, WHY_PENDING
from workloads.ray import spec as ray_spec
from workloads.ray.component import RayWorkload
from workloads.ray.deadline import pre_running_deadline_seconds
from workloads.ray.exports import ray_exports
from workloads.smoke_exports import ray_smoke_exports

TRAINER_MODULE = ["python", "-m", "trainer.entrypoint"]


def _run_bounds(config: StackConfig) -> str:
    """The trainer's own bounds on a Ray run (trainer/watchdog.py, trainer/failures.py), from the plan's step time,
    which is an estimate (core/run_time.py)."""
    plan, period = config.workload.plan, config.workload.checkpoint_period
    limits = limits_for(plan, period)
    cost_min = limits.attempts_without_progress * attempt_cost_seconds(plan, period) / 60
    return (f"Ray run bounds: the trainer ends a run with no new step within {limits.startup_s:.0f} s of a "
            f"(re)start or for {limits.stall_s:.0f} s while training (exit 7, trainer/watchdog.py), and after "
            f"{limits.attempts_without_progress} attempts in a row that train no new step, whatever ends them "
            f"(reclaims, evictions, failures: exit 8, at most ~{cost_min:.0f} min of every slice; a reclaim is "
            "never a failure); all rest on the plan's estimated step time: compare the first steps' times in "
            "the job log with the plan")


class RayBackend:
    name = "rayjob"
    runs_worker_environment = True
    slices_released = "when the RayJob ends (shutdownAfterJobFinishes deletes its RayCluster)"
    data_on_tpu_hosts = True
    next_steps = (
        ("rayJobStatusCommand", "the job's state (add --watch to follow it)"),
        (FOLLOW_LOG, "follow the training driver's log (the submitter streams it)"),
        RUN_PODS, WHY_PENDING, SMOKE_RESULT,
        ("rayAuthTokenCommand", "the Ray token: the dashboard asks for it, `ray job` reads it"),
        ("rayDashboardPortForward", "then open http://localhost:8265 (Ray dashboard, TPU charts per node)"),
        TENSORBOARD, RELAUNCH,
    )

    def deploy(self, config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
        workload = RayWorkload("ray", config, context.bundle, context.namespace, context.service_account,
                               context.cluster, opts=context.provider_options, worker_image=context.worker_image,
                               worker_image_ready=context.worker_image_ready, nodes_ready=context.nodes_ready)
        exports = ray_exports(config, context.cluster_location, workload.job_name)
        exports["relaunchCommand"] = relaunch_export(workload.resources["ray-job"])
        if workload.smoke_job_name:
            exports.update(ray_smoke_exports(config.kubernetes.namespace, workload.smoke_job_name))
        return exports

    def maxtext_settings(self, config: StackConfig) -> dict[str, str]:
        # The workers' own builder on the run settings the entrypoint carries (tests/workloads/test_goodput.py
        # runs the trainer's parser on the RayJob's command and gets the same keys).
        return settings_of(maxtext_overrides(config.workload.plan, ray_spec.run_settings(config)))

    def training_launch(self, config: StackConfig) -> TrainingLaunch:
        command = ray_spec.entrypoint(config)
        if command[:len(TRAINER_MODULE)] != TRAINER_MODULE:
            raise RuntimeError(f"the RayJob runs {command[:3]}, not {TRAINER_MODULE}")
        spec = ray_spec.ray_spec(config)
        return TrainingLaunch(argv=tuple(command[len(TRAINER_MODULE):]),
                              source="ray: trainer.entrypoint --print-argv (trainer.worker)",
                              argv_built_on_workers=True,
                              libtpu_init_args=libtpu_init_args(spec.model, spec.shape.generation, spec.slices,
                                                                spec.dcn_nics))

    def runs_smoke_test(self, config: StackConfig) -> bool:
        return config.workload.smoke_test

    def capacity_wait_notes(self, config: StackConfig) -> list[str]:
        deadline = pre_running_deadline_seconds(config)
        plan = config.workload.plan
        if deadline is None:
            notes = ["waiting for capacity: no limit (capacityWaitSeconds=0): while it waits, first for its "
                     "cluster and later for a reclaimed slice, the job pays for its head and any slices that did "
                     "arrive"]
        else:
            idle = (f"; until then at worst {plan.min_slices - 1} of the {plan.min_slices} slices it needs to start "
                    "are up and idle, billing" if plan.min_slices > 1 else "")
            notes = [f"waiting for capacity: the RayJob fails after {deadline} s ({deadline / 60:.0f} min) without "
                     "its cluster up (capacityWaitSeconds; KubeRay preRunningDeadlineSeconds); its RayCluster is "
                     "deleted with every pod that did come up (shutdownAfterJobFinishes), and nothing retries it, not "
                     f"even `pulumi up`: `relaunchCommand` starts it again{idle}",
                     f"a later wait (a {'slice below elasticMinSlices' if plan.elastic else 'reclaimed slice'} "
                     f"away) lasts at most the same {deadline} s with no worker group running: the head and the "
                     f"{'slices that stayed' if plan.slices > 1 else 'slice, if it came back,'} bill meanwhile, "
                     "then the trainer ends the run (exit 7) and its cluster is deleted"]
        if plan.min_slices < plan.slices:
            notes.append(f"elastic {plan.min_slices}..{plan.slices}: the job starts once {plan.min_slices} slice(s) "
                         f"are up (RayCluster replicas {plan.min_slices}), then its driver asks KubeRay for "
                         f"{plan.slices} (trainer/grow.py); the others join, and bill, when capacity allows")
        return notes

    def images(self, config: StackConfig) -> list[str]:
        return [] if config.workload.worker_environment == "image" else [config.ray.image]

    def resizes(self, config: StackConfig) -> bool:
        return config.workload.plan.elastic     # Ray Train's elastic scaling between elasticMinSlices and slices

    def assumptions(self, config: StackConfig) -> list[str]:
        lines = [
            "KubeRay: `pulumi up` reads the RayJob CRD the GKE Ray add-on serves and creates the RayJob only if its "
            "schema declares every field the RayJob sets (authOptions: KubeRay >= 1.5.1), since the API server "
            "drops unknown fields with a warning; offline, the schema bundle's KubeRay v1.7.0 stands in. Assumed: "
            "the add-on's operator does what its CRD declares; check while a job runs: `kubectl get raycluster -n "
            "NAMESPACE -o jsonpath='{.items[*].spec.authOptions.mode}'` prints token",
            "RayJob-owned cluster: the add-on's KubeRay is assumed to create the job's RayCluster from "
            "rayClusterSpec and delete it when the job ends (shutdownAfterJobFinishes), releasing the slices; no "
            "Ray autoscaler is used. Check after a job: `kubectl get rayjob -n NAMESPACE` shows JOB STATUS "
            "SUCCEEDED/FAILED with DEPLOYMENT STATUS Complete/Failed, `kubectl get raycluster` lists none, and "
            "`kubectl get nodes -l cloud.google.com/gke-tpu-topology` empties within ~10 min",
            OUT_OF_HBM_ASSUMPTION, _run_bounds(config),
            "RayJob submitter: the add-on's KubeRay is assumed to keep the submitter pod's own command (python -m "
            "trainer.submitter: submit once, poll the job's status until it ends, the log a side stream) and pass "
            "it the head address, job id and Ray token (KubeRay v1.7.0 configureSubmitterContainer); check: "
            "`kubectl logs job/RAYJOB -n NAMESPACE` shows \"submitter: submitted job\"",
            "finished RayJobs kept: the add-on's KubeRay is assumed to run without the operator setting "
            "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES=true (KubeRay v1.7.0), which deletes a RayJob once it finishes; "
            "the next `pulumi up --refresh` would then create it again and train again (a finished run resumes "
            "at its last step, after its slices' start-up has billed). Check after a job: `kubectl get rayjob -n "
            "NAMESPACE` still lists it"]
        if config.workload.plan.elastic:
            lines.append("elastic start: the add-on's KubeRay is assumed to submit the job once elasticMinSlices "
                         "slices are Running and Ready (the group's replicas), to keep the job's cluster as the "
                         "driver patched it and to create the other slices' pods (v1.7.0 source); check while it "
                         "runs: the driver log says `asked KubeRay for N slices` and `kubectl get raycluster -n "
                         "NAMESPACE -o jsonpath='{.items[*].spec.workerGroupSpecs[0].replicas}'` prints N")
        if config.stack.run:
            lines.append("shared queue: the add-on's KubeRay is assumed to create nothing for a RayJob created with "
                         "spec.suspend true until Kueue's RayJob integration unsuspends it (KubeRay RayJob suspend; "
                         "Kueue v0.19.2 pkg/controller/jobs/rayjob), and not to count the time it waits in the "
                         "queue against preRunningDeadlineSeconds; check while it queues: `kubectl get rayjob -n "
                         "NAMESPACE` shows JOB DEPLOYMENT STATUS Suspended and `kubectl get raycluster -n "
                         "NAMESPACE` lists none")
        if config.workload.plan.elastic:
            lines.append("grow policy: the API server is assumed to evaluate the admission policy's CEL over the "
                         "RayCluster as JSON maps (Kubernetes >= 1.30 ValidatingAdmissionPolicy), so it compares "
                         "the cluster key by key and lets the job's service account change only the TPU group's "
                         "replicas; its status.typeChecking may warn about iterating a typed object. Check: `kubectl "
                         "label raycluster -n NAMESPACE CLUSTER x=y --as=system:serviceaccount:NAMESPACE:SA` is "
                         "refused by the policy")
        if config.ray.capacity_wait_s == DEFAULT_CAPACITY_WAIT_S:
            lines.append(f"first wait for capacity: capacityWaitSeconds defaults to "
                         f"{DEFAULT_CAPACITY_WAIT_S // 3600} h, an allowance for a TPU quota request "
                         "granted within a working day (assumed, not a published figure); a grant that comes later "
                         "finds the job failed (PreRunningDeadlineExceeded): run `pulumi stack output "
                         "relaunchCommand` then")
        if config.ray.pre_running_deadline_s is not None:
            lines.append("pre-start deadline: preRunningDeadlineSeconds (KubeRay >= 1.6; `pulumi up` refuses a "
                         "served CRD without it) is assumed to end only a job whose cluster never came up; after one "
                         "did not, `kubectl get rayjob -n NAMESPACE -o jsonpath='{.items[*].status.reason}'` prints "
                         "PreRunningDeadlineExceeded and its RayCluster is gone")
        if install_cache.cache_kind(config) == "node":
            lines.append(f"install cache owner: the Ray image ({config.ray.image}) is assumed to run as uid "
                         f"{install_cache.RAY_UID} (ray-project/ray docker/base-deps/Dockerfile RAY_UID), the user "
                         "the init container hands the node's cache directory to; check a worker's `id -u`")
        budget = config.workload.shutdown
        if budget.sees_notice and budget.spot:
            lines.append("Ray workers: the notice (SIGTERM to the worker pod) is assumed to reach `ray start`, whose "
                         "drain the training loop hears (Ray 2.60 ray.train.get_preemption_info); the containers "
                         "exec it themselves (ray.io/overwrite-container-cmd), assuming the add-on's KubeRay honours "
                         "the annotation: check that PID 1 of a TPU worker is ray (`kubectl exec POD -- cat "
                         "/proc/1/cmdline`); otherwise a preemption falls back to the last periodic checkpoint")
        return lines


RAY = RayBackend()
