"""What the offline plan cannot verify, shown as assumptions to check rather than facts.

Each line names the rule, what the plan assumed, and how to check it against the real system. The sources are
in docs/assumptions.md.
"""
from __future__ import annotations

from infra.tpu_quota import quota_need
from infra.config import StackConfig
from infra.gke_versions import NO_CHANNEL
from infra.identity import read_buckets
from infra.storage import EXPIRING_PREFIXES
from infra.worker_image import base_image
from preview.harness import OFFERED_GKE_VERSIONS
from workloads import install_cache
from workloads.backends import backend_for


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
    return lines


def _project(config: StackConfig) -> list[str]:
    """What any stack's `pulumi up` reads or needs from the project that mocks stand in for (infra/preflight.py)."""
    project = config.gcp.project
    return [f"APIs: cloudresourcemanager.googleapis.com and container.googleapis.com are assumed on in {project} "
            "(the look-ups run before the stack can enable APIs); otherwise `pulumi up` stops in one line naming "
            f"`gcloud services enable cloudresourcemanager.googleapis.com container.googleapis.com --project "
            f"{project}`",
            "control plane: reached through GKE's DNS endpoint with a Google token; whoever runs `pulumi up` or "
            "kubectl needs container.clusters.connect (check: `gcloud container clusters get-credentials ... "
            "--dns-endpoint && kubectl get ns`)"]


def _cluster_owned(config: StackConfig) -> list[str]:
    """What only a stack that creates the cluster assumes (a run on a shared cluster creates none of it)."""
    return ["goodput log reader: a custom role holding only logging.logEntries.list is assumed enough to read the "
            "goodput entries back from the _Default bucket (creating it needs roles/iam.roleAdmin); check the "
            "dashboard's goodput chart after a run",
            "upgrades: GKE is assumed to accept the NO_MINOR_OR_NODE_UPGRADES exclusion's fixed start in the past "
            "(terraform-provider-google's acceptance test uses a 2019 start); check `gcloud container clusters "
            "describe CLUSTER --format='value(maintenancePolicy)'`"]


def _first_run(config: StackConfig) -> list[str]:
    """What a run's `pulumi up` reads from the project that mocks stand in for: quota, buckets."""
    project = config.gcp.project
    lines = []
    need = quota_need(config.tpu.shape.generation.name, config.gcp.region, config.tpu.total_chips,
                      config.tpu.capacity.value)
    if need.quotas:
        lines.append(f"TPU quota: the {need.kind} quota the slices spend is assumed to be listed by Cloud Quotas as "
                     + " or ".join(q.describe() for q in need.quotas) + " (no Google page read names these ids; "
                     f"infra/tpu_quota.py); check: {need.list_command(project)}")
    read = read_buckets(config)
    if read:
        lines.append(f"read buckets: {', '.join(read)} are assumed to be in {project}, so the plan grants the "
                     "training identity read access there; `pulumi up` reads each bucket's project first and, for "
                     "one in another project (or one it cannot read), grants nothing and prints the one `gcloud "
                     "storage buckets add-iam-policy-binding` command its owner runs")
    if config.storage.keep_on_destroy:
        lines.append(f"checkpoint bucket: the offline plan assumes {config.storage.bucket_name} does not exist yet; "
                     "`pulumi up` looks it up and imports a bucket kept by an earlier destroy: one in another "
                     "location than " + config.storage.location + " or without hierarchical namespace is refused "
                     f"before anything is created; adoption sets soft delete to {config.storage.soft_delete_days} "
                     "days, the lifecycle rules (" + ", ".join(f"{p} {d}d" for p, d in EXPIRING_PREFIXES.items())
                     + ") and labels, and warns each setting it changes")
    return lines


def assumptions(config: StackConfig) -> list[str]:
    """Each stack's own: a shared cluster's are the cluster's and the project's, a run's on a shared cluster the
    project's and its run's, a single stack's all of them."""
    owns_cluster = config.stack.owns_cluster
    lines = (_gke_version(config) if owns_cluster else []) + _project(config)
    lines += _cluster_owned(config) if owns_cluster else []
    return lines + (_run(config) if config.stack.has_run else [])


def _gke_version(config: StackConfig) -> list[str]:
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
    return lines


def _run(config: StackConfig) -> list[str]:
    lines = _first_run(config)
    backend = backend_for(config)
    for image in backend.images(config):
        lines.append(f"image {image}: its tag or digest cannot be checked offline; check it exists "
                     "(gcloud artifacts docker images describe / docker manifest inspect)")
    if config.worker_image is not None:
        lines.append(f"worker image base: {base_image()} (worker_env/Dockerfile FROM): its tag cannot be checked "
                     "offline and it is pinned by tag, not digest; check it exists (docker manifest inspect)")
    if config.worker_image is not None and config.worker_image.builder == "docker":
        lines.append("worker image: built from worker_env/Dockerfile during `pulumi up` (needs Docker with BuildKit "
                     "where it runs); never built offline")
    elif config.worker_image is not None:
        lines.append("worker image: built by Cloud Build from worker_env/cloudbuild.yaml during `pulumi up` (needs "
                     "gcloud where it runs; the recipe is checked against the API's schema, never built offline); "
                     "the build's E2_HIGHCPU_8 minutes bill once per change of the lock (the code is not in the "
                     "image); it runs in imageBuildRegion, assumed allowed for the project")
    if config.worker_image is not None and not config.cluster.autopilot:
        lines.append("image streaming: the TPU and system pools stream the image (gcfsConfig; the node account "
                     "holds roles/serviceusage.serviceUsageConsumer, GKE's requirement); GKE's page lists no TPU "
                     "limitation and no price of its own for it, so both are assumed; a pool without it pulls "
                     "the whole image first")
    lines.extend(backend.assumptions(config))
    planned = config.workload.plan
    if planned.evaluates:
        # MaxText 0.2.5 trainers/pre_train/train.py compiles the eval step ahead of time right after the train
        # step's, at the run's start; Grain's eval passes run at the train batch (core/planner.py eval_batch).
        # train_compile compiles train.train_step only, so aot/eval_compile.py builds the eval step as train.py does.
        batches = ", ".join(f"{batch:g}" for batch in planned.eval_batches)
        if config.workload.compile_check == "off":
            lines.append(f"eval step: its HBM (forward only, per_device_batch_size {batches}) is the planner's "
                         "estimate, never XLA's (compileCheck=off); MaxText compiles it ahead of time at the run's "
                         "start, so a step that does not fit ends the run there, before its first train step (exit "
                         "6, out of HBM); check: the run's log shows the eval step's memory stats")
        else:
            lines.append(f"eval step (forward only, per_device_batch_size {batches}): XLA decides it before "
                         "anything is created, compiled by aot/eval_compile.py from MaxText's own eval_step, "
                         "shardings and donation as train.py builds them at the run's start (read from MaxText "
                         "0.2.5's source, assumed to be the program the workers compile); check: the run's log "
                         "shows the eval step's memory stats after the train step's")
    if config.network.dcn:
        lines.append("MegaScale: libtpu is assumed to send cross-slice traffic over the NICs named by "
                     "--megascale_grpc_interface_prefixes (the GKE multislice tutorial's worker env)")
    lines.extend(_preemption(config))
    lines.append("admission: the JobSet webhook's and KubeRay's refusals are played offline from their v0.12.0 and "
                 "v1.7.0 code (preview/k8s/admission.py), with the controllers' default feature gates; a cluster "
                 "running other versions or gates may refuse more; `kubectl apply --dry-run=server` of the "
                 "plan's --out files asks the real webhook")
    if not config.cluster.autopilot:
        lines.append("slice pools from zero: spot and on-demand TPU pools autoscale 0..hosts per zone and GKE is "
                     "assumed to add a multi-host slice's VMs at once when its pods ask (\"About TPUs in GKE\"); "
                     "check no TPU node exists while no job runs: kubectl get nodes -l "
                     "cloud.google.com/gke-tpu-topology")
        if backend.runs_worker_environment and install_cache.cache_kind(config) == "node":
            lines.append("install cache: the pods keep uv's cache in the hostPath "
                         "/var/lib/tpu-multislice/install-cache, assumed allowed in the namespace (no restrictive "
                         "Pod Security level); check a worker's `ls -ld /var/cache/install`")
    lines.append("dashboard: per-slice charts group by the node-pool label and TPU charts read libtpu's metrics "
                 "port 8431; check them once in Metrics Explorer")
    lines.append("TPU pod size: a 2 vCPU / 4 GiB allowance for the node's DaemonSets is assumed "
                 "(core/node_sizing.py); check `kubectl describe node` allocatable against the pods' requests")
    lines.append(_hbm_estimate(config))
    lines.extend(_training_run(config))
    return lines


def _training_run(config: StackConfig) -> list[str]:
    """What the run's data, weights and name rest on that only Cloud Storage and GKE can show."""
    run = config.workload.run
    lines = [f"run {run.run_name}: the offline plan reaches no Cloud Storage; `pulumi up` lists "
             "gs://BUCKET/maxtext/RUN/checkpoints/*/_CHECKPOINT_METADATA (Orbax's step file) and says whether it "
             "starts, resumes or finds the run finished, refuses data globs that match no file and weights of "
             "another model"]
    if run.dataset_type == "grain":
        lines.append("data through Cloud Storage FUSE: the mount options (metadata caches, parallel downloads into a "
                     "file cache on each pod's own disk) follow GKE's FUSE performance guide and were not "
                     "measured here; the sidecar's default CPU and memory are assumed enough; check a step's time "
                     "with data against the synthetic run's")
        lines.append(f"data cache disk: each pod that reads data is assumed to get its {run.data_cache_gib} GiB "
                     "disk from GKE's Persistent Disk CSI driver (on by default) within its start-up, in the "
                     "slice's zone; the Hyperdisk Balanced price is assumed (preview/prices.py). Check `kubectl get "
                     "pvc -n NAMESPACE` shows each pod's gke-gcsfuse-cache claim Bound")
        if config.pods_use_host_network:
            lines.append("host-network pods mount the data as their Kubernetes service account (hostNetworkPodKSA: "
                         "GKE >= 1.33.3-gke.1226000 per GKE's FUSE docs; not among the stack's version floors); "
                         "check the pod's gke-gcsfuse-sidecar log for a successful mount")
    if run.eval_dataset_path:
        hosts = config.tpu.slices * config.tpu.shape.hosts
        lines.append(f"eval split size: each data-loading host (up to {hosts}: one per TPU VM; one client on "
                     "Pathways) is assumed to get at least one record of evalDatasetPath (MaxText 0.2.5 cannot "
                     "pad the eval pass of a host that had none and "
                     "fails at the first eval); at run start, before step 1, the trainer counts ArrayRecord and "
                     "mounted Parquet splits from their file indexes and ends the run (exit 4, data error) when a "
                     "host would get none (trainer/eval_split.py); other splits are not counted")
    if run.read_paths:
        lines.append("read-only access: roles/storage.objectViewer (objects.get, objects.list) is assumed enough for "
                     "FUSE and Orbax to read the data and weights buckets (nothing reads their bucket metadata); a "
                     "403 in the job's log would say otherwise")
    return lines


def _hbm_estimate(config: StackConfig) -> str:
    """The planner's HBM verdict rests on compiles made here, with a jax the workers do not run."""
    import json

    from core.worker_lock import load_pins
    from preview.compile import CALIBRATION_PATH, PROJECT_ROOT

    rows = json.loads(CALIBRATION_PATH.read_text())["rows"]
    pairs = sorted({f"jax {row['jax']} + libtpu {row['libtpu']}" for row in rows})
    lock = load_pins(PROJECT_ROOT)
    memory = config.workload.plan.memory
    backend = backend_for(config)
    if backend.runs_worker_environment:
        workers = (f"the workers run jax {lock.get('jax', '?')} + libtpu {lock.get('libtpu', '?')} (their jax needs "
                   "Python 3.12; TPU_MULTISLICE_COMPILE_PYTHON names a Python that has it for `--compile`, and "
                   "docs/planner.md measures the two front ends' difference)")
    else:
        # Its images bring their own jax and libtpu (e.g. Pathways' servers and MaxText image).
        images = ", ".join(image.split("@")[0] for image in backend.images(config))
        workers = (f"the {backend.name} images ({images}) bring jax and libtpu of their own, which the stack does "
                   "not choose")
    return (f"HBM: the plan's {memory.total / 2**30:.1f} GiB per device ({memory.verdict}) is an estimate held to XLA's "
            f"memory assignment compiled here with {', '.join(pairs)} (core/xla_calibration.json); {workers}: "
            "check with `python -m preview --stack NAME --compile` where it can"
            + ("" if config.workload.memory_check else
               "; memoryCheck is false: this step runs on your word that XLA's compile of it fits (a step that "
               "does not ends the run with exit 6, out of HBM)"))
