"""The stack's config keys: name, type, default and description, in one table.

Pulumi.yaml's `config:` block and the README's config table are checked against this table by tests,
so the three never drift. Defaults live here only (Pulumi.yaml carries types and descriptions).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra import naming
from infra.config import key_checks as check
from infra.config.key_checks import Check

NAMESPACE = "tpu-multislice"


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()
# Marks a default that is computed from other keys (documented in the description).
DERIVED: Any = None


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # Pulumi config type: string | integer | boolean | array
    description: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    # The key's own rule (value alone), run right after parsing; None when only its type and choices matter.
    check: Check | None = None


KEYS: tuple[Key, ...] = (
    # --- Google Cloud ---
    Key("project", "string", "GCP project ID that owns every resource.",
        check=check.matches(naming.PROJECT_ID, "a project ID is 6-30 lowercase letters, digits or '-', starting with a letter")),
    Key("zone", "string", "Zone of the cluster and TPU slices, e.g. us-east5-b (must offer the TPU generation).",
        check=check.matches(naming.ZONE, "a zone looks like us-east5-b")),
    Key("region", "string", "Region of the VPC subnets; derived from zone when unset, and must contain zone.", DERIVED,
        check=check.matches(naming.REGION, "a region looks like us-east5")),
    # --- GKE cluster ---
    Key("clusterName", "string", "GKE cluster name (also the prefix of network and service-account names).",
        "tpu-multislice",
        check=check.matches(naming.CLUSTER_NAME, "1-40 lowercase letters, digits or '-', starting with a letter and not ending with '-'")),
    Key("clusterMode", "string", "GKE mode of operation.", "standard", ("standard", "autopilot")),
    Key("gkeVersion", "string", "Minimum GKE control-plane version (e.g. 1.34 or 1.34.1-gke.1829001); unset means "
        "the release channel's default raised to the minimum every enabled feature needs.", DERIVED),
    Key("releaseChannel", "string", "GKE release channel.", "REGULAR",
        ("RAPID", "REGULAR", "STABLE", "EXTENDED", "UNSPECIFIED")),
    Key("deletionProtection", "boolean", "Refuse to delete the GKE cluster (set false for throw-away stacks).", True),
    Key("systemPoolMachineType", "string", "Machine type of the CPU node pool for system pods and the Ray head "
        "(Standard mode only).", "e2-standard-16"),
    Key("systemPoolNodes", "integer", "Nodes in the CPU node pool (Standard mode only).", 1,
        check=check.at_least(1, "at least 1 (the Ray head runs there)")),
    # --- TPU slices ---
    Key("tpuGeneration", "string", "TPU generation (see core/tpu_catalog.py).", "v6e",
        ("v4", "v5e", "v5p", "v6e", "tpu7x")),
    Key("tpuTopology", "string", "Chip topology of one slice, e.g. 4x4 (v5e/v6e) or 2x2x4 (v4/v5p/tpu7x).", "4x4"),
    Key("tpuMachineType", "string", "TPU VM machine type; unset picks the catalog's multi-host type for "
        "multi-host topologies.", DERIVED),
    Key("slices", "integer", "Number of TPU slices; one node pool each.", 2,
        check=check.at_least(1)),
    Key("capacity", "string", "How TPU VMs are obtained.", "on-demand",
        ("on-demand", "spot", "reservation", "flex-start")),
    Key("reservationName", "string", "Specific reservation to consume; required when capacity is reservation.", ""),
    # --- Networking ---
    Key("nodeCidr", "string", "Primary subnet range for nodes.", "10.0.0.0/20"),
    Key("podCidr", "string", "Secondary range for pods.", "10.4.0.0/14"),
    Key("serviceCidr", "string", "Secondary range for services.", "10.8.0.0/20"),
    Key("dcn", "boolean", "Create extra VPCs for the data-center network between slices and attach them to "
        "every TPU node.", False),
    Key("dcnMtu", "integer", "MTU of the extra DCN VPCs (1300-8896).", 8896,
        check=check.mtu),
    Key("dcnSubnets", "array", "One subnet range per extra DCN VPC.", ("10.50.0.0/16", "10.60.0.0/16")),
    Key("dranet", "boolean", "Hand the DCN NICs to pods through GKE managed DRANET (needs dcn).", False),
    # --- Checkpoint storage ---
    Key("bucketName", "string", "Checkpoint bucket name; default PROJECT-CLUSTER-ckpt.", DERIVED,
        check=check.bucket_name),
    Key("bucketLocation", "string", "Checkpoint bucket location; default the region.", DERIVED),
    Key("keepCheckpointsOnDestroy", "boolean", "Keep the checkpoint bucket when the stack is destroyed "
        "(false lets destroy delete it with its objects).", True),
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
    Key("checkpointPeriod", "integer", "Save a checkpoint every this many steps (MaxText checkpoint_period).", 50,
        check=check.at_least(1)),
    Key("perDeviceBatchSize", "string", "MaxText per_device_batch_size (may be fractional, e.g. 0.5); unset lets "
        "the planner pick the preset's tuned value, lowered until it fits HBM.", DERIVED,
        check=check.positive_number),
    Key("elasticMinSlices", "integer", "Elastic training: the fewest slices the job keeps running on. Unset: on "
        "spot, the fewest slices the model fits on; otherwise all slices (fixed size).", DERIVED),
    Key("maxFailures", "integer", "Ray Train FailureConfig.max_failures (-1 = retry forever). Unset: -1 on spot, "
        "3 otherwise.", DERIVED,
        check=check.at_least(-1, "-1 (retry forever) or at least 0")),
    Key("workerEnvironment", "string", "How the workers get their locked Python environment "
        "(worker_env/requirements.lock): runtime (Ray workers and JobSet pods install the lock when they start; no "
        "Docker needed) or image (the stack builds worker_env/Dockerfile, pushes it to an Artifact Registry "
        "repository it creates and runs every pod on it; needs Docker where pulumi up runs). Not used by "
        "workloadBackend=pathways, which runs pathwaysTrainerImage.", "runtime", ("runtime", "image")),
    Key("maxtextVersion", "string", "MaxText release the workers install (>= 0.2.2; older ones train the wrong "
        "model).", "0.2.5",
        check=check.maxtext_release),
    Key("rayImage", "string", "Container image of the Ray head and TPU workers (pinned release; Python 3.12 for "
        "MaxText).", "rayproject/ray:2.60.0-py312",
        check=check.pinned_image("rayproject/ray:2.60.0-py312")),
    Key("rayClusterName", "string", "Name of the RayCluster (KubeRay allows at most 53 characters).", "maxtext",
        check=check.dns1035(naming.RAYCLUSTER_NAME_MAX)),
    Key("rayJobName", "string", "Prefix of the RayJob name; a hash of the job's inputs is appended (at most 47 "
        "characters in all).", "maxtext-train",
        check=check.dns1035(naming.RAYJOB_NAME_MAX - naming.HASH_SUFFIX)),
    Key("dashboardExposure", "string", "How the Ray dashboard and job API are reachable: cluster-ip (in-cluster "
        "only; use kubectl port-forward) or internal-lb (an internal load balancer limited to "
        "dashboardSourceRanges).", "cluster-ip", ("cluster-ip", "internal-lb")),
    Key("dashboardSourceRanges", "array", "Source CIDR ranges allowed to reach the internal load balancer.", ()),
    # --- JobSet + Kueue backend (workloadBackend=jobset) ---
    Key("smokeTest", "boolean", "Run the multislice smoke job (trainer/smoke.py: device count and a cross-slice "
        "all-reduce) next to training, on either backend.", True),
    Key("jobsetImage", "string", "Container image of the JobSet training and smoke pods (pinned tag or digest, "
        "Python 3.12); the pinned MaxText and JAX are pip-installed at start unless the image has them.",
        "python:3.12.11-slim-bookworm",
        check=check.pinned_image("python:3.12.11-slim-bookworm")),
    Key("jobsetName", "string", "Prefix of the training JobSet's name (DNS-1035, at most 24 characters); a hash "
        "of its inputs is appended, and the smoke JobSet is PREFIX-smoke-HASH.", "maxtext",
        check=check.dns1035(naming.JOBSET_PREFIX_MAX)),
    Key("maxRestarts", "integer", "JobSet failurePolicy.maxRestarts: how often a failed JobSet is recreated "
        "as a whole (0 or more).", 3,
        check=check.at_least(0, "0 or more (JobSet failurePolicy.maxRestarts)")),
    Key("kueueTpuQuota", "integer", "Kueue ClusterQueue nominal quota of google.com/tpu chips; unset = slices x "
        "chips per slice. Less than the workload needs is refused (Kueue could never admit it).", DERIVED),
    # --- Pathways backend (workloadBackend=pathways) ---
    Key("pathwaysJobName", "string", "Name of the Pathways JobSet (DNS-1035 label of at most 28 characters, the "
        "limit MaxText's elastic-training guide gives for Pathways workload names).", "maxtext-pathways",
        check=check.dns1035(naming.PATHWAYS_NAME_MAX)),
    Key("pathwaysElasticSlices", "integer", "Slices the run may lose without ending its Pathways session (xpk "
        "--elastic-slices; the proxy's --num_elastic_slices). 0 turns elastic training off; must be below "
        "slices.", 0,
        check=check.at_least(0, "0 (not elastic) or more")),
    Key("pathwaysMaxSliceRestarts", "integer", "Restarts allowed per slice (xpk --max-slice-restarts): the worker "
        "Job's backoffLimit is this times the hosts per slice.", 10,
        check=check.at_least(0, "0 or more")),
    Key("pathwaysElasticMaxRetries", "integer", "MaxText elastic_max_retries: in-process recoveries before the run "
        "gives up (at least 1 when elastic).", 10,
        check=check.at_least(0, "0 or more (1 or more when elastic)")),
    Key("pathwaysElasticTimeoutSeconds", "integer", "MaxText elastic_timeout_seconds: how long a recovery waits for "
        "the lost slice to come back.", 300,
        check=check.at_least(1, "at least 1 second")),
    Key("pathwaysProfiling", "boolean", "MaxText profiler=xplane. Refused together with elastic training (MaxText "
        "does not support an elastic event during a profile).", False),
    Key("pathwaysServerImage", "string", "Pathways resource manager and worker image (pinned tag or digest; the "
        "JAX of its tag, jax-<version> or <date>-jax_<version>, must be the JAX of pathwaysTrainerImage).",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20261001-jax_0.10.2"
        "@sha256:3b2c87dccc93266d84e7fcf5be84fcbcf97d7f837b4e8a0f318eb52cef4c0836",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.0")),
    Key("pathwaysProxyImage", "string", "Pathways IFRT proxy image (pinned; same release tag as "
        "pathwaysServerImage).",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:20261001-jax_0.10.2"
        "@sha256:99abf3bb5d536659fa50dfbecdf53c4e3dfd1a803406e560a2ce845e7289f401",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.0")),
    Key("pathwaysTrainerImage", "string", "Image of the MaxText container in the Pathways head (pinned; MaxText >= "
        "0.2.4 for the elastic keys).", "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.4",
        check=check.pinned_image("us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.4")),
)

KEYS_BY_NAME = {key.name: key for key in KEYS}
