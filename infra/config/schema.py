"""The stack's config keys: name, type, default and description, in one table.

The config reference's table (docs/configuration.md) is generated from this table and checked against it by tests.
Defaults live here only: Pulumi.yaml declares no keys (infra/config/docs.py says why).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.maxtext_args import DEFAULT_CHECKPOINTS_TO_KEEP
from infra import naming
from infra.config import key_checks as check
from infra.config.key_checks import Check

NAMESPACE = "tpu-multislice"


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()
# Defaults computed from other keys (build.py); the descriptions below say how.
DEFAULT_CHECKPOINT_PERIOD = 50
DEFAULT_SYSTEM_POOL_MACHINE_TYPE = "e2-standard-16"
# How long a RayJob may wait for its cluster to come up before KubeRay gives up on it (workloads/ray/deadline.py).
# The first run of a new project often waits for TPU quota, which starts at 0 and is granted on request; a grant
# that a person reviews is assumed to come within a working day's hours (an allowance, not a published figure:
# the plan lists it as an assumption). An hour, the old value, ended most such first runs before the grant.
# While it waits nothing but the head bills unless some of the slices it waits for did come up, so the
# allowance is bounded too: a job that gives up is started again with `relaunchCommand`.
DEFAULT_RAY_PRE_RUNNING_DEADLINE_S = 6 * 3600
# The longest any wait for capacity lasts on Ray (capacityWaitSeconds): the first wait above, a fixed run waiting for
# a reclaimed slice, an elastic run below its minimum. One bound for all: what bills meanwhile is the same (the
# head and the slices that did arrive), and so is the fix when it runs out (relaunchCommand once capacity is back).
DEFAULT_CAPACITY_WAIT_S = DEFAULT_RAY_PRE_RUNNING_DEADLINE_S
# The Pathways head's node: the CPU machine type of the Pathways on GKE cluster guide (Pulumi.pathways.yaml).
PATHWAYS_SYSTEM_POOL_MACHINE_TYPE = "n2-standard-64"
# A training run's name (runName): a folder under the bucket's maxtext/ and, on Pathways, the JobSet's name when
# pathwaysJobName is unset (at most naming.PATHWAYS_NAME_MAX there; infra/config/data_rules.py checks it).
RUN_NAME_MAX = 40
# A fully qualified Pulumi stack name, as a StackReference takes it (Pulumi "Stack references": "<organization>/<project>/<stack>").
STACK_REFERENCE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# Marks a default that is computed from other keys (documented in the description).
DERIVED: Any = None


@dataclass(frozen=True)
class AppliesTo:
    """When a key does something: only while the key `when` has one of `values`. A key the user sets while it
    does nothing is refused (rules.check_applies), with `reason`, so a setting is never silently ignored."""
    when: str
    values: tuple[Any, ...]
    reason: str

    def describe(self) -> str:
        return f"{self.when}=" + "|".join(show(value) for value in self.values)


def show(value: Any) -> str:
    """A config value as the user writes it: true/false for booleans, the string itself otherwise."""
    return str(value).lower() if isinstance(value, bool) else str(value)


# The workload backends and cluster modes keys belong to (the config reference's "applies to" column).
_ON_RAY = AppliesTo("workloadBackend", ("rayjob",), "only the Ray backend (RayCluster + RayJob) reads it")
_ON_JOBSET = AppliesTo("workloadBackend", ("jobset",), "only the JobSet + Kueue backend reads it")
_ON_PATHWAYS = AppliesTo("workloadBackend", ("pathways",), "only the Pathways backend reads it")
_ON_RAY_OR_JOBSET = AppliesTo("workloadBackend", ("rayjob", "jobset"),
                              "the Pathways head runs MaxText from pathwaysTrainerImage")
_ON_RUNTIME_INSTALL = AppliesTo("workerEnvironment", ("runtime",),
                                "the image the stack builds from worker_env/Dockerfile runs instead")
_ON_STANDARD = AppliesTo("clusterMode", ("standard",), "Autopilot creates and configures nodes itself")
_WITH_DCN = AppliesTo("dcn", (True,), "no DCN VPCs exist without dcn=true")
_WITH_GRAIN = AppliesTo("datasetType", ("grain",), "datasetType=synthetic reads no files")


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # Pulumi config type: string | integer | boolean | array; object (a map) is this stack's own
    description: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    # The key's own rule (value alone), run right after parsing; None when only its type and choices matter.
    check: Check | None = None
    # When the key does something (all conditions hold); empty: always.
    applies_to: tuple[AppliesTo, ...] = ()


KEYS: tuple[Key, ...] = (
    # --- Google Cloud ---
    Key("project", "string", "GCP project ID that owns every resource.",
        check=check.matches(naming.PROJECT_ID, "a project ID is 6-30 lowercase letters, digits or '-', starting with a letter")),
    Key("zone", "string", "Zone of the cluster and TPU slices, e.g. us-east5-b (must offer the TPU generation).",
        check=check.matches(naming.ZONE, "a zone looks like us-east5-b")),
    Key("region", "string", "Region of the VPC subnets; derived from zone when unset, and must contain zone.", DERIVED,
        check=check.matches(naming.REGION, "a region looks like us-east5")),
    Key("adminBootstrap", "boolean", "true: the project's admin ran the once-per-project step (`python -m "
        "preview.deployer_roles --admin-script`: the APIs, the node and image-build service accounts, the goodput log "
        "reader role, the deployer's grants), and the stack uses those accounts and that role instead of creating "
        "them, so the deployer needs neither roles/iam.serviceAccountAdmin nor roles/iam.roleAdmin and cannot grant "
        "itself more than the stack grants. false: the stack creates them, which needs those two roles (a project "
        "whose deployer is its Owner).", False),
    Key("tpuZoneCheck", "boolean", "Check zone and region against the tables in infra/config/tpu_zones.py (GCP "
        "regions; the zones the Cloud TPU \"TPU regions and zones\" page lists for each TPU generation). Set false "
        "only for a zone or region newer than those tables; a zone the tables already list is refused with false.",
        True),
    # --- GKE cluster ---
    Key("clusterName", "string", "GKE cluster name (also the prefix of network and service-account names).",
        "tpu-multislice",
        check=check.matches(naming.CLUSTER_NAME, "1-40 lowercase letters, digits or '-', starting with a letter and not ending with '-'")),
    Key("clusterMode", "string", "GKE mode of operation.", "standard", ("standard", "autopilot")),
    Key("gkeVersion", "string", "GKE control-plane version to create the cluster at (e.g. 1.35, or an exact offered "
        "patch); unset: the release channel's default. Either must be offered in the location and meet the minimum "
        "of every enabled feature (checked before anything is created).", DERIVED),
    Key("releaseChannel", "string", "GKE release channel.", "REGULAR",
        ("RAPID", "REGULAR", "STABLE", "EXTENDED", "UNSPECIFIED")),
    Key("deletionProtection", "boolean", "Refuse to delete the GKE cluster, and protect the checkpoint bucket (Pulumi "
        "protect: destroy and replacements refuse to touch it); set false before destroying, or for throw-away "
        "stacks.", True),
    Key("controlPlaneAuthorizedNetworks", "array", "CIDR ranges allowed to reach the control plane's public IP "
        "endpoint (master authorized networks). Empty: the cluster has no public IP endpoint; kubectl and pulumi "
        "reach it through GKE's DNS-based endpoint, authorised by IAM (container.clusters.connect), from anywhere. "
        "0.0.0.0/0 is refused.", ()),
    Key("systemPoolMachineType", "string", "Machine type of the CPU node pool for system pods and the Ray or "
        "Pathways head. Unset: e2-standard-16, or n2-standard-64 with workloadBackend=pathways (the Pathways head "
        "needs more than e2-standard-16 holds; n2-standard-64 is the Pathways on GKE guide's CPU machine type).",
        DERIVED, check=check.cpu_machine_type, applies_to=(_ON_STANDARD,)),
    Key("systemPoolNodes", "integer", "Nodes in the CPU node pool.", 1,
        check=check.at_least(1, "at least 1 (the Ray head runs there)"), applies_to=(_ON_STANDARD,)),
    # --- TPU slices ---
    Key("tpuGeneration", "string", "TPU generation (see core/tpu_catalog.py).", "v6e",
        ("v4", "v5e", "v5p", "v6e", "tpu7x")),
    Key("tpuTopology", "string", "Chip topology of one slice, e.g. 4x4 (v5e/v6e) or 2x2x4 (v4/v5p/tpu7x).", "4x4"),
    Key("tpuMachineType", "string", "TPU VM machine type; unset picks the catalog's multi-host type for "
        "multi-host topologies.", DERIVED,
        check=check.machine_type("ct6e-standard-4t"), applies_to=(_ON_STANDARD,)),
    Key("slices", "integer", "Number of TPU slices; one node pool each.", 2,
        check=check.at_least(1)),
    Key("capacity", "string", "How TPU VMs are obtained.", "on-demand",
        ("on-demand", "spot", "reservation", "flex-start")),
    Key("reservationName", "string", "Specific reservation to consume (NAME, or projects/PROJECT/reservations/NAME "
        "for a shared one); required when capacity is reservation.", "",
        check=check.reservation_name,
        applies_to=(AppliesTo("capacity", ("reservation",), "only capacity=reservation consumes a reservation"),)),
    Key("warmSlices", "integer", "Slices whose node pools keep their TPU hosts while no job runs (interactive "
        "work; billed around the clock). The other pools scale from 0 to a whole slice when a job's pods ask and "
        "back to 0 after it. Unset: slices with capacity=reservation (paid for anyway), else 0. 0..slices; "
        "flex-start pools always start empty.", DERIVED,
        check=check.at_least(0, "0 (every slice scales to zero when idle) or more"),
        applies_to=(_ON_STANDARD,)),
    # --- Networking ---
    Key("nodeCidr", "string", "Primary subnet range for nodes (CIDR with prefix; room for every node the stack "
        "creates).", "10.0.0.0/20"),
    Key("podCidr", "string", "Secondary range for pods (CIDR with prefix; GKE gives each node a /24 of it, so it "
        "must hold nodes x 256 addresses).", "10.4.0.0/14"),
    Key("serviceCidr", "string", "Secondary range for services.", "10.8.0.0/20"),
    Key("dcn", "boolean", "Create extra VPCs for the data-center network between slices and attach them to "
        "every TPU node.", False,
        applies_to=(AppliesTo("clusterMode", ("standard",), "Autopilot creates and configures nodes itself and "
                              "cannot attach extra node networks to TPU VMs"),)),
    Key("dcnMtu", "integer", "MTU of the extra DCN VPCs (1300-8896).", 8896,
        check=check.mtu, applies_to=(_WITH_DCN,)),
    Key("dcnSubnets", "array", "One subnet range per extra DCN VPC.", ("10.50.0.0/16", "10.60.0.0/16"),
        applies_to=(_WITH_DCN,)),
    Key("dranet", "boolean", "Hand the DCN NICs to pods through GKE managed DRANET (needs dcn).", False,
        applies_to=(AppliesTo("dcn", (True,), "DRANET hands out the DCN NICs, and there are none without dcn"),)),
    # --- Checkpoint storage ---
    Key("bucketName", "string", "Checkpoint bucket name; default PROJECT-CLUSTER-ckpt.", DERIVED,
        check=check.bucket_name),
    Key("bucketLocation", "string", "Checkpoint bucket location: a region, a dual-region (e.g. NAM4) or a "
        "multi-region (US, EU, ASIA), never a zone; default the region.", DERIVED,
        check=check.bucket_location),
    Key("keepCheckpointsOnDestroy", "boolean", "Keep the checkpoint bucket when the stack is destroyed "
        "(false lets destroy delete it with its objects). A kept bucket is adopted (imported) by the next pulumi up "
        "of a stack with the same bucketName: one in another location, or without hierarchical namespace, is "
        "refused before anything is created; its soft delete, lifecycle rules and labels become the stack's, "
        "each change printed as a warning first.", True),
    Key("softDeleteDays", "integer", "Days deleted checkpoint objects stay recoverable (0 or 7-90).", 7,
        check=check.soft_delete_days),
    # --- Kubernetes ---
    Key("namespace", "string", "Kubernetes namespace of the training workload.", "tpu-training",
        check=check.matches(naming.DNS1123_LABEL, "a Kubernetes namespace is a DNS-1123 label: 1-63 lowercase letters, digits or '-'")),
    Key("serviceAccount", "string", "Kubernetes service account of the training pods (bound to the bucket "
        "through Workload Identity).", "tpu-trainer",
        check=check.matches(naming.DNS1123_SUBDOMAIN, "a Kubernetes service account name is a DNS-1123 subdomain")),
    # --- Training workload ---
    Key("workloadBackend", "string", "How the training job runs on the cluster.", "rayjob",
        ("rayjob", "jobset", "pathways")),
    Key("model", "string", "Model preset (core/presets.py): llama3-8b, llama3-70b, qwen3-0.6b.", "llama3-8b"),
    Key("trainSteps", "integer", "Training steps of the job.", 200,
        check=check.at_least(1)),
    Key("checkpointPeriod", "integer", "Save a checkpoint every this many steps (MaxText checkpoint_period). "
        f"Unset: {DEFAULT_CHECKPOINT_PERIOD}, or trainSteps when the run is shorter.", DERIVED,
        check=check.at_least(1)),
    Key("checkpointsToKeep", "integer", "Checkpoints a run keeps (MaxText max_num_checkpoints_to_keep; older ones "
        "are deleted as new ones are saved). MaxText's own default keeps every checkpoint, ~100 GB each for "
        "llama3-8b with its optimizer state; at least 1 (the newest is what a restarted run resumes from).",
        DEFAULT_CHECKPOINTS_TO_KEEP, check=check.at_least(1, "at least 1 (the newest checkpoint is what a run "
                                                          "resumes from)")),
    Key("perDeviceBatchSize", "string", "MaxText per_device_batch_size, e.g. 2; the global batch (this x JAX "
        "devices) must split evenly over the mesh's data/fsdp shards, which on this planner's fully sharded meshes "
        "means a whole number. Unset lets the planner pick the preset's tuned value, lowered until it fits HBM.",
        DERIVED, check=check.positive_number),
    Key("memoryCheck", "boolean", "false keeps a step the planner estimates over XLA's HBM limit (refused "
        "otherwise), for when a compile of that exact step fits: python -m preview --stack NAME --compile, or the "
        "python -m preview.compile command the refusal prints. Needs perDeviceBatchSize (the step the compile "
        "checked). A step that does not fit ends the run with exit 6 (out of HBM), never retried.", True),
    Key("compileCheck", "string", "Which of the run's steps XLA compiles before you pay, in pulumi preview, pulumi "
        "up and python -m preview --stack NAME (every slice count of an elastic run; needs MaxText and libtpu where they "
        "run, scripts/setup.sh): auto compiles every step that has no kept verdict (a warning when it "
        "cannot), always the same (a refusal when it cannot), off none. Verdicts are kept in "
        "compile-verdicts.json under the step's argv, flags and versions (keep or commit it: a step is compiled "
        "once per key); a step XLA refused is refused.", "auto",
        choices=("auto", "always", "off")),
    Key("elasticMinSlices", "integer", "Elastic training: the fewest slices the job keeps running on. Unset: on "
        "spot, the fewest slices the model fits on; otherwise all slices (fixed size).", DERIVED,
        applies_to=(AppliesTo("workloadBackend", ("rayjob",), "elastic training on fewer slices is Ray Train's; "
                              "JobSet restarts the whole JobSet and Pathways restores on the full mesh (use "
                              "pathwaysElasticSlices there)"),)),
    Key("maxFailures", "integer", "Ray Train FailureConfig.max_failures: how often a failure other than a "
        "preemption is retried (-1 = forever), so a deterministic error (an import error, a wrong model) stops "
        "instead of looping on spot. Preemptions are counted apart (max_preemption_failures: as many as would cost "
        "what the run costs training, at least 3; core/run_bounds.py), and on an elastic run a loss that leaves "
        "the group at or above elasticMinSlices is not counted at all.", 3,
        check=check.at_least(-1, "-1 (retry forever) or at least 0"),
        applies_to=(AppliesTo("workloadBackend", ("rayjob",), "Ray Train's failure config; JobSets use "
                              "maxRestarts"),)),
    Key("capacityWaitSeconds", "integer", "The longest a Ray run waits for capacity, each time: the first wait "
        "for its cluster (the head and the first elasticMinSlices slices Running and Ready: KubeRay's "
        "preRunningDeadlineSeconds, KubeRay >= 1.6, then the RayJob fails and its cluster is deleted), and every "
        "wait with no worker group running later on (a fixed run waiting for a reclaimed slice, an elastic run "
        "below elasticMinSlices: the trainer ends the run, exit 7). Meanwhile the head and the slices that did "
        "arrive bill; the job's own time (its activeDeadlineSeconds) starts after the first wait. 0: wait without "
        "limit.", DEFAULT_CAPACITY_WAIT_S,
        # preRunningDeadlineSeconds is an int32 of at least 1 (rayjob_types.go `+kubebuilder:validation:Minimum=1`);
        # 0 leaves it out.
        check=check.within(0, 2**31 - 1, "0 (no limit) or 1 to 2147483647 seconds"), applies_to=(_ON_RAY,)),
    Key("rayPreRunningDeadlineSeconds", "integer", "The older name of capacityWaitSeconds (the first wait only "
        "then); still read: it sets capacityWaitSeconds when that is unset, and both set must agree.",
        DERIVED, check=check.within(0, 2**31 - 1, "0 (no limit) or 1 to 2147483647 seconds"),
        applies_to=(_ON_RAY,)),
    Key("workerEnvironment", "string", "How the workers get their locked Python environment "
        "(worker_env/requirements.lock): image (the stack builds worker_env/Dockerfile with imageBuilder, pushes "
        "it to an Artifact Registry repository it creates and runs every pod on it: a slice that scales from "
        "zero, grows or replaces a Spot host installs nothing at start) or runtime (every pod installs the lock, "
        "about 740 MB of wheels, from the package index at every start: no repository, build or gcloud, but the "
        "index is on every start's path). The default is image on every stack, warm pools included: their nodes "
        "too are replaced on repair and upgrade, and a runtime job reinstalls on every start. Not used by "
        "workloadBackend=pathways, which runs pathwaysTrainerImage.", "image", ("image", "runtime"),
        applies_to=(_ON_RAY_OR_JOBSET,)),
    Key("imageBuilder", "string", "What builds the workers' image: cloud-build (Cloud Build, submitted by pulumi "
        "up with gcloud; no Docker needed where it runs) or docker (a local Docker/BuildKit daemon).",
        "cloud-build", ("cloud-build", "docker"),
        applies_to=(_ON_RAY_OR_JOBSET, AppliesTo("workerEnvironment", ("image",),
                                                 "only an image is built (workerEnvironment=runtime builds none)"))),
    Key("imageBuildRegion", "string", "Where Cloud Build runs the image build. auto: the cluster's region when it "
        "is one of the six regions Cloud Build allows every project (us-central1, us-west2, europe-west1, asia-east1, "
        "australia-southeast1, southamerica-east1; some projects may build nowhere else: "
        "https://cloud.google.com/build/docs/locations), else the nearest of them. The image repository stays in "
        "the cluster's region; the push crosses regions once per lock change.", "auto",
        check=check.matches(naming.BUILD_REGION, "auto, or a Cloud Build region such as us-central1"),
        applies_to=(_ON_RAY_OR_JOBSET, AppliesTo("workerEnvironment", ("image",), "only an image is built"),
                    AppliesTo("imageBuilder", ("cloud-build",), "only Cloud Build has a build region"))),
    Key("maxtextVersion", "string", "MaxText release the workers install (>= 0.2.2; older ones train the wrong "
        "model).", "0.2.5",
        check=check.maxtext_release, applies_to=(_ON_RAY_OR_JOBSET,)),
    Key("rayImage", "string", "Container image of the Ray head and TPU workers with workerEnvironment=runtime "
        "(pinned release; Python 3.12 for MaxText). The built worker image starts from the same release "
        "(worker_env/Dockerfile).", "rayproject/ray:2.60.0-py312",
        check=check.pinned_image("rayproject/ray:2.60.0-py312"),
        applies_to=(_ON_RAY, _ON_RUNTIME_INSTALL)),
    Key("rayClusterName", "string", "Name of the job's Ray cluster as the stack labels it: its pods carry "
        "tpu-multislice/ray-cluster=NAME, which the head's Service NAME-head-svc and the dashboard load balancer "
        "select (KubeRay names the RayCluster itself after the RayJob; at most 53 characters).",
        "maxtext",
        check=check.dns1035(naming.RAYCLUSTER_NAME_MAX), applies_to=(_ON_RAY,)),
    Key("rayJobName", "string", "Prefix of the RayJob name; a hash of the job's inputs is appended (at most 47 "
        "characters in all).", "maxtext-train",
        check=check.dns1035(naming.RAYJOB_NAME_MAX - naming.HASH_SUFFIX), applies_to=(_ON_RAY,)),
    Key("dashboardExposure", "string", "How the Ray dashboard and job API are reachable: cluster-ip (in-cluster "
        "only; use kubectl port-forward) or internal-lb (an internal load balancer limited to "
        "dashboardSourceRanges).", "cluster-ip", ("cluster-ip", "internal-lb"), applies_to=(_ON_RAY,)),
    Key("dashboardSourceRanges", "array", "Source CIDR ranges allowed to reach the internal load balancer.", (),
        applies_to=(_ON_RAY, AppliesTo("dashboardExposure", ("internal-lb",), "only the internal load balancer "
                                       "has source ranges"))),
    # --- JobSet + Kueue backend (workloadBackend=jobset) ---
    Key("smokeTest", "boolean", "Run the multislice smoke job (trainer/smoke.py: device count and a cross-slice "
        "all-reduce) first, in the training job's own pods, and start training only if it passed (Ray and JobSet "
        "backends).", True,
        applies_to=(AppliesTo("workloadBackend", ("rayjob", "jobset"), "the Pathways backend has no smoke job"),)),
    Key("jobsetImage", "string", "Container image of the JobSet training pods with workerEnvironment=runtime "
        "(pinned tag or digest, Python 3.12), into which they install the workers' locked environment at start.",
        "python:3.12.11-slim-bookworm",
        check=check.pinned_image("python:3.12.11-slim-bookworm"), applies_to=(_ON_JOBSET, _ON_RUNTIME_INSTALL)),
    Key("jobsetName", "string", "Prefix of the training JobSet's name (DNS-1035, at most 24 characters); a hash "
        "of its inputs is appended.", "maxtext",
        check=check.dns1035(naming.JOBSET_PREFIX_MAX), applies_to=(_ON_JOBSET,)),
    Key("maxRestarts", "integer", "JobSet failurePolicy.maxRestarts: how often a failed JobSet is recreated "
        "as a whole (0 or more).", 3,
        check=check.at_least(0, "0 or more (JobSet failurePolicy.maxRestarts)"),
        applies_to=(AppliesTo("workloadBackend", ("jobset", "pathways"), "only JobSets have failurePolicy."
                              "maxRestarts; the Ray backend uses maxFailures"),)),
    Key("kueueTpuQuota", "integer", "Kueue ClusterQueue nominal quota of google.com/tpu chips; unset = slices x "
        "chips per slice. Less than the workload needs is refused (Kueue could never admit it).", DERIVED,
        applies_to=(AppliesTo("workloadBackend", ("jobset",), "only the JobSet backend queues through Kueue"),)),
    # --- Pathways backend (workloadBackend=pathways) ---
    Key("pathwaysJobName", "string", "Name of the Pathways JobSet (DNS-1035 label of at most 22 characters: "
        "JobSet's webhook limits the head's coordinator address, twice the name plus 19, to 63).", "maxtext-pathways",
        check=check.dns1035(naming.PATHWAYS_NAME_MAX), applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysElasticSlices", "integer", "Slices the run may lose without ending its Pathways session (xpk "
        "--elastic-slices; the proxy's --num_elastic_slices). 0 turns elastic training off; must be below "
        "slices.", 0,
        check=check.at_least(0, "0 (not elastic) or more"), applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysMaxSliceRestarts", "integer", "Restarts allowed per slice (xpk --max-slice-restarts): the worker "
        "Job's backoffLimit is this times the hosts per slice.", 10,
        check=check.at_least(0, "0 or more"), applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysElasticMaxRetries", "integer", "MaxText elastic_max_retries: in-process recoveries before the run "
        "gives up (at least 1 when elastic).", 10,
        check=check.at_least(0, "0 or more (1 or more when elastic)"), applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysElasticTimeoutSeconds", "integer", "MaxText elastic_timeout_seconds: how long a recovery waits for "
        "the lost slice to come back.", 300,
        check=check.at_least(1, "at least 1 second"), applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysProfiling", "boolean", "MaxText profiler=xplane. Refused together with elastic training (MaxText "
        "does not support an elastic event during a profile).", False, applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysServerImage", "string", "Pathways resource manager and worker image (pinned tag or digest; the "
        "JAX of its tag, jax-<version> or <date>-jax_<version>, must be the JAX of pathwaysTrainerImage).",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20261001-jax_0.10.2"
        "@sha256:3b2c87dccc93266d84e7fcf5be84fcbcf97d7f837b4e8a0f318eb52cef4c0836",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.0"),
        applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysProxyImage", "string", "Pathways IFRT proxy image (pinned; same release tag as "
        "pathwaysServerImage).",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:20261001-jax_0.10.2"
        "@sha256:99abf3bb5d536659fa50dfbecdf53c4e3dfd1a803406e560a2ce845e7289f401",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.0"),
        applies_to=(_ON_PATHWAYS,)),
    Key("pathwaysTrainerImage", "string", "Image of the MaxText container in the Pathways head (pinned; MaxText >= "
        "0.2.4 for the elastic keys).", "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.4",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.4"),
        applies_to=(_ON_PATHWAYS,)),
    # --- Training data, starting weights, MaxText settings, runs ---
    Key("datasetType", "string", "What the run trains on: synthetic (MaxText's generated batches: no data, a "
        "demonstration of the stack, the default) or grain (your files at datasetPath, read by Grain, whose data "
        "position is saved with every checkpoint so a resumed run reads on from the next record). MaxText's tfds "
        "and hf pipelines are not offered: neither saves its position, so every restart on Spot would train the "
        "first records again, and tfds needs TensorFlow, which the workers do not install (core/data.py); convert "
        "such data to ArrayRecord or Parquet (docs/configuration.md).", "synthetic", ("synthetic", "grain")),
    Key("datasetPath", "string", "Training files for datasetType=grain: one gs:// glob of ArrayRecord "
        "(*.array_record*) or Parquet (*.parquet) files, e.g. gs://my-data/c4/train-*.array_record. Parquet "
        "holds text in a column named text, tokenized with the model's own tokenizer. The training identity gets "
        "read-only access to the bucket; the pods read it through Cloud Storage FUSE.", "",
        check=check.data_pattern, applies_to=(_WITH_GRAIN,)),
    Key("evalDatasetPath", "string", "Eval split for datasetType=grain (MaxText grain_eval_files): a gs:// glob "
        "like datasetPath; unset: no eval.", "", check=check.data_pattern, applies_to=(_WITH_GRAIN,)),
    Key("evalInterval", "integer", "Evaluate on evalDatasetPath every this many steps (MaxText eval_interval). "
        "Unset with evalDatasetPath: every checkpointPeriod steps.", DERIVED,
        check=check.at_least(1), applies_to=(_WITH_GRAIN,)),
    Key("evalSteps", "integer", "Batches per evaluation pass (MaxText eval_steps); each host pads once its share "
        "of evalDatasetPath runs out, so every host runs the same steps. Required with evalDatasetPath on more "
        "than one host; unset on one host: the whole split. On Spot at most what a notice leaves after the save "
        "(MaxText saves at a notice only after the pass; the refusal names the figure).", DERIVED,
        check=check.at_least(1), applies_to=(_WITH_GRAIN,)),
    Key("dataCacheGiB", "integer", "Size in GiB of the disk that holds Cloud Storage FUSE's file cache of "
        "datasetPath and evalDatasetPath on each pod that reads them (every TPU host; the head on Pathways): one "
        "Balanced Persistent Disk or Hyperdisk Balanced volume per pod, created with the pod and deleted with it, "
        "shared by the data buckets (each caches up to its share, less 10 % for the file system). Billed while "
        "the pods run (the offline plan prices it). At least 10 (the smallest Balanced Persistent Disk).", 100,
        check=check.within(10, 65536, "10 to 65536 GiB (a Balanced Persistent Disk holds 10 GiB to 64 TiB)"),
        applies_to=(_WITH_GRAIN,)),
    Key("loadParametersPath", "string", "Start a new run from these weights: a gs:// Orbax checkpoint of the "
        "model's parameters (MaxText load_parameters_path, e.g. made from Hugging Face weights with MaxText's "
        "conversion tools, docs/configuration.md). A run that already has checkpoints of its own resumes from "
        "those instead. The training identity gets read-only access to the bucket.", "",
        check=check.checkpoint_path),
    Key("maxtextSettings", "object", "Further MaxText settings as a map of MaxText key to value (e.g. "
        "learning_rate: 3.0e-5, warmup_steps_fraction: 0.05), passed to every backend. Keys must be MaxText "
        "0.2.5 base.yml keys; keys the stack sets itself are refused with the config key that sets them; keys "
        "that change memory go through the planner (ici_context_parallelism, num_vocab_tiling, mu_dtype, "
        "eval_per_device_batch_size) or are "
        "named in the plan as not estimated.", ()),
    Key("runName", "string", "Name of the training run: its folder in the bucket (maxtext/RUN/ holds its "
        "checkpoints), its job and its goodput series on the dashboard. A new name starts a new run (from "
        "loadParametersPath or from scratch); the same name resumes from its own checkpoints; a finished run "
        "is trained again under a new name. Unset: the job name and the model, e.g. maxtext-train-llama3-8b.",
        DERIVED, check=check.run_name(RUN_NAME_MAX)),
    # --- Many runs, one cluster (infra/config/stack_role.py; docs/shared-cluster.md) ---
    Key("stackRole", "string", "What this stack is: cluster-and-run (one cluster with its one run, the default "
        "without clusterStack), cluster (network, cluster, system pool and controllers that runs share, and no "
        "run), or run (a run on the cluster stack clusterStack names; the default with clusterStack).", DERIVED,
        ("cluster-and-run", "cluster", "run")),
    Key("clusterStack", "string", "stackRole=run: the cluster stack this run lands on, as Pulumi's fully "
        "qualified stack name ORG/PROJECT/STACK (organization/tpu-multislice/team on a self-managed backend); "
        "read with a StackReference. Setting it makes the stack a run stack, whose project, zone and clusterName "
        "are read from the cluster stack's outputs (set, they must equal them).", DERIVED,
        check=check.matches(STACK_REFERENCE, "ORG/PROJECT/STACK, each letters, digits, '-', '_' or '.'")),
    Key("clusterTpuQuota", "integer", "stackRole=cluster: TPU chips (google.com/tpu) the shared Kueue "
        "ClusterQueue admits at once across all runs; a run that would go over it waits whole in the queue. Set "
        "it to the chips your project's TPU quota (or reservation) holds in the zone.", DERIVED,
        check=check.at_least(1),
        applies_to=(AppliesTo("stackRole", ("cluster",), "only a cluster stack owns the shared queue"),)),
    Key("runStacks", "array", "stackRole=cluster: the run stacks on this cluster (ORG/PROJECT/STACK). While it "
        "is not empty the cluster, its network and its node account are protected: `pulumi destroy` of the "
        "cluster stack refuses until they are destroyed and the list is emptied. A run it does not list, or an "
        "entry no run stack matches, is said in the plans and at a run's `pulumi up`.", (),
        applies_to=(AppliesTo("stackRole", ("cluster",), "only a cluster stack has runs on it"),)),
)

KEYS_BY_NAME = {key.name: key for key in KEYS}
