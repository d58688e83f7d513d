"""What the offline plan cannot verify, shown as assumptions to check rather than facts.

Each line names the rule, what the plan assumed, and how to check it against the real system. The sources are
in docs/assumptions.md.
"""
from __future__ import annotations

from infra.config import StackConfig
from infra.gke_versions import NO_CHANNEL
from preview.harness import OFFERED_GKE_VERSIONS


def _images(config: StackConfig) -> list[str]:
    backend = config.workload.backend
    if config.workload.worker_environment == "image" and backend != "pathways":
        return []
    if backend == "rayjob":
        return [config.ray.image]
    if backend == "jobset":
        return [config.jobset.image]
    pathways = config.pathways
    return [pathways.server_image, pathways.proxy_image, pathways.trainer_image]


def _preemption(config: StackConfig) -> list[str]:
    """The save at a Spot notice rests on a write rate and a GKE setting that only the cloud can show."""
    from core.preemption import ASSUMED_WRITE_BYTES_PER_S

    budget = config.workload.shutdown
    if not budget.sees_notice:
        return []
    lines = [f"checkpoint writes: each TPU host is assumed to write {ASSUMED_WRITE_BYTES_PER_S / 1e9:g} GB/s to the "
             f"bucket (no published per-client figure; core/preemption.py), which sizes the save at a notice "
             f"({budget.save.seconds:.0f} s) and the pods' grace period; time a multi-GB `gcloud storage cp` from a "
             "TPU host to the bucket"]
    if budget.node_shutdown_s is not None:
        lines.append(f"Spot shutdown budget: the TPU pools set kubelet shutdownGracePeriodSeconds="
                     f"{budget.node_shutdown_s} (critical pods {budget.node_critical_s}), which GKE documents for "
                     "Spot VMs in Standard node pools (GKE >= 1.35.0-gke.1171000, \"About Spot VMs\"); that it holds "
                     "for TPU Spot VMs is assumed: check a TPU node's kubelet config (kubectl get --raw "
                     "/api/v1/nodes/NODE/proxy/configz) shows shutdownGracePeriod 2m0s")
    if config.workload.backend == "rayjob" and budget.spot:
        lines.append("Ray workers: the notice (SIGTERM to the worker pod) is assumed to reach `ray start`, whose "
                     "drain the training loop hears (Ray 2.60 ray.train.get_preemption_info); KubeRay wraps the "
                     "command in bash, so check that PID 1 of a TPU worker is ray, or that bash forwards SIGTERM "
                     "(`kubectl exec POD -- cat /proc/1/cmdline`); otherwise a preemption falls back to the last "
                     "periodic checkpoint")
    return lines


def _first_run(config: StackConfig) -> list[str]:
    """What a real `pulumi up` reads or needs from the project that mocks stand in for (infra/preflight.py)."""
    project = config.gcp.project
    lines = [f"APIs: cloudresourcemanager.googleapis.com and container.googleapis.com are assumed on in {project} "
             "(the look-ups run before the stack can enable APIs); otherwise `pulumi up` stops in one line naming "
             f"`gcloud services enable cloudresourcemanager.googleapis.com container.googleapis.com --project "
             f"{project}`",
             "control plane: reached through GKE's DNS endpoint with a Google token; whoever runs `pulumi up` or "
             "kubectl needs container.clusters.connect (check: `gcloud container clusters get-credentials ... "
             "--dns-endpoint && kubectl get ns`)",
             "goodput log reader: a custom role holding only logging.logEntries.list is assumed enough to read the "
             "goodput entries back from the _Default bucket (creating it needs roles/iam.roleAdmin); check the "
             "dashboard's goodput chart after a run",
             "upgrades: GKE is assumed to accept the NO_MINOR_OR_NODE_UPGRADES exclusion's fixed start in the past "
             "(terraform-provider-google's acceptance test uses a 2019 start); check `gcloud container clusters "
             "describe CLUSTER --format='value(maintenancePolicy)'`"]
    if config.storage.keep_on_destroy:
        lines.append(f"checkpoint bucket: the offline plan assumes {config.storage.bucket_name} does not exist yet; "
                     "`pulumi up` looks it up and imports a bucket kept by an earlier destroy, which succeeds only "
                     "if its settings still match the stack's bucket inputs")
    return lines


def assumptions(config: StackConfig) -> list[str]:
    cluster = config.cluster
    lines = []
    if cluster.gke_version is None:
        channel = cluster.release_channel
        offered = (OFFERED_GKE_VERSIONS["defaultClusterVersion"] if channel == NO_CHANNEL
                   else OFFERED_GKE_VERSIONS["releaseChannelDefaultVersion"].get(channel, "?"))
        lines.append(f"GKE version: the cluster is created at the {channel} channel's default, assumed here to be "
                     f"{offered} (a public copy of GKE's release notes); `pulumi up` asks GKE for the location's "
                     f"versions and refuses a default below {cluster.minimum_version}")
    else:
        lines.append(f"GKE version: gkeVersion={cluster.gke_version} is assumed to be offered in the location; "
                     f"`pulumi up` checks it against the {cluster.release_channel} channel's newest version first "
                     "(the provider exposes no channel minimum: an older patch the channel no longer offers is "
                     "refused by GKE itself), and only warns once the cluster exists")
    lines.extend(_first_run(config))
    for image in _images(config):
        lines.append(f"image {image}: its tag or digest cannot be checked offline; check it exists "
                     "(gcloud artifacts docker images describe / docker manifest inspect)")
    if config.workload.worker_environment == "image" and config.workload.backend != "pathways":
        lines.append("worker image: built from worker_env/Dockerfile during `pulumi up` (needs Docker with BuildKit "
                     "where it runs); never built offline")
    if config.workload.backend == "rayjob":
        lines.append("KubeRay: `pulumi up` reads the RayJob CRD the GKE Ray add-on serves and creates the RayJob only "
                     "if its schema declares every field the RayJob sets (authOptions: KubeRay >= 1.5.1), since the "
                     "API server drops unknown fields with a warning; offline, the schema bundle's KubeRay v1.7.0 "
                     "stands in. Assumed: the add-on's operator does what its CRD declares; check while a job runs: "
                     "`kubectl get raycluster -n NAMESPACE -o jsonpath='{.items[*].spec.authOptions.mode}'` prints "
                     "token")
        lines.append("RayJob-owned cluster: the add-on's KubeRay is assumed to create the job's RayCluster from "
                     "rayClusterSpec and delete it when the job ends (shutdownAfterJobFinishes), releasing the "
                     "slices; no Ray autoscaler is used. Check after a job: `kubectl get rayjob -n NAMESPACE` shows "
                     "JOB STATUS SUCCEEDED/FAILED with DEPLOYMENT STATUS Complete/Failed, `kubectl get raycluster` "
                     "lists none, and `kubectl get nodes -l cloud.google.com/gke-tpu-topology` empties within ~10 min")
        lines.append(_ray_run_bounds(config))
    if config.network.dcn:
        lines.append("MegaScale: libtpu is assumed to send cross-slice traffic over the NICs named by "
                     "--megascale_grpc_interface_prefixes (the GKE multislice tutorial's worker env)")
    lines.extend(_preemption(config))
    if config.workload.backend in ("jobset", "pathways"):
        lines.append("JobSet failure policy: its rules tell a preempted pod (restart, not counted) from an exit code a "
                     "retry cannot fix (fail at once) by the Job controller's failure message \"... matching FailJob "
                     "rule at index N\" (Kubernetes pkg/controller/job/pod_failure_policy.go; JobSet v0.12 "
                     "onJobFailureMessagePatterns exists for this), which is text, not an API field; after a failure "
                     "`kubectl get jobs -n NAMESPACE -o jsonpath='{..conditions}'` shows the message")
    if not config.cluster.autopilot:
        lines.append("slice pools from zero: spot and on-demand TPU pools autoscale 0..hosts per zone and GKE is "
                     "assumed to add a multi-host slice's VMs at once when its pods ask (\"About TPUs in GKE\"); "
                     "check no TPU node exists while no job runs: kubectl get nodes -l "
                     "cloud.google.com/gke-tpu-topology")
        if config.workload.worker_environment == "runtime" and config.workload.backend != "pathways":
            lines.append("install cache: the pods keep uv's cache in the hostPath "
                         "/var/lib/tpu-multislice/install-cache, assumed allowed in the namespace (no restrictive "
                         "Pod Security level) and the Ray image's user assumed to be uid 1000; check a worker's "
                         "`ls -ld /var/cache/install`")
    lines.append("dashboard: per-slice charts group by the node-pool label and TPU charts read libtpu's metrics "
                 "port 8431; check them once in Metrics Explorer")
    lines.append("TPU pod size: a 2 vCPU / 4 GiB allowance for the node's DaemonSets is assumed "
                 "(core/node_sizing.py); check `kubectl describe node` allocatable against the pods' requests")
    lines.append(_hbm_estimate(config))
    return lines


def _ray_run_bounds(config: StackConfig) -> str:
    """The trainer's own bounds on a Ray run (trainer/watchdog.py, trainer/failures.py), from the plan's step time,
    which is an estimate (core/run_time.py)."""
    from core.run_bounds import limits_for, preemption_budget

    limits = limits_for(config.workload.plan)
    budget = preemption_budget(config.workload.plan, config.workload.train_steps)
    return (f"Ray run bounds: the trainer ends a run with no step within {limits.startup_s:.0f} s of a (re)start "
            f"or for {limits.stall_s:.0f} s while training (exit 7, trainer/watchdog.py) and after {budget} "
            "preemptions (a memory eviction looks like one); both rest on the plan's estimated step time: compare "
            "the first steps' times in the job log with the plan")


def _hbm_estimate(config: StackConfig) -> str:
    """The planner's HBM verdict rests on compiles made here, with a jax the workers do not run."""
    import json

    from core.worker_lock import load_pins
    from preview.compile import CALIBRATION_PATH, PROJECT_ROOT

    rows = json.loads(CALIBRATION_PATH.read_text())["rows"]
    pairs = sorted({f"jax {row['jax']} + libtpu {row['libtpu']}" for row in rows})
    lock = load_pins(PROJECT_ROOT)
    memory = config.workload.plan.memory
    return (f"HBM: the plan's {memory.total / 2**30:.1f} GiB per device ({memory.verdict}) is an estimate held to XLA's "
            f"memory assignment compiled here with {', '.join(pairs)} (core/xla_calibration.json); the workers run "
            f"jax {lock.get('jax', '?')} + libtpu {lock.get('libtpu', '?')}, whose jax front end this machine cannot "
            "install (Python 3.12): check with `python -m preview --stack NAME --compile` where it can")
