"""Physical names and the GCP / Kubernetes rules they must obey.

Pulumi logical names stay fixed ("slice-0", "dcn-1", ...) so a physical rename never re-keys state;
physical names are derived from the cluster name here, and shortened with a stable hash suffix where a
GCP limit would otherwise be exceeded.
"""
from __future__ import annotations

import hashlib
import re

# GKE cluster: RFC 1035 label, at most 40 characters.
CLUSTER_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
# GCP project id: 6-30 characters, lowercase letters, digits, hyphens, starts with a letter.
PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
# Zones: REGION-LETTER (us-east5-b), or an AI zone REGION-aiNLETTER (us-central1-ai1a; Compute Engine "About AI
# zones", https://cloud.google.com/compute/docs/regions-zones/ai-zones).
ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-(?:[a-z]|ai[0-9]+[a-z])$")
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# imageBuildRegion: auto (infra/config/build_region.py picks one) or a region.
BUILD_REGION = re.compile(r"^(auto|[a-z]+-[a-z]+[0-9]+)$")
# Compute Engine resource names (reservations, reservation blocks): RFC 1035, 1-63 characters
# (https://cloud.google.com/compute/docs/naming-resources).
RFC1035_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
# A specific reservation as GKE consumes it: NAME, a shared reservation projects/PROJECT/reservations/NAME, or a
# block / sub-block of one, NAME/reservationBlocks/BLOCK[/reservationSubBlocks/SUB-BLOCK] (GKE "Consume reserved
# zonal resources", https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations).
RESERVATION = re.compile(rf"^(?:projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/reservations/)?{RFC1035_NAME}"
                         rf"(?:/reservationBlocks/{RFC1035_NAME}(?:/reservationSubBlocks/{RFC1035_NAME})?)?$")
# Compute Engine machine types: FAMILY-... in lowercase letters and digits, e.g. e2-standard-16, n2-custom-8-16384,
# ct6e-standard-4t (https://cloud.google.com/compute/docs/machine-resource).
MACHINE_TYPE = re.compile(r"^(?=.{1,63}$)[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
# A CPU machine type the system pool can be created with. Compute Engine names a predefined type
# SERIES-TYPE-VCPUS[-SUFFIX] (e2-standard-16, n2-highmem-8, c3-standard-8-lssd, c3-highcpu-192-metal;
# https://cloud.google.com/compute/docs/machine-resource, "machine type terminology"), a shared-core type by its size
# (e2-micro, e2-small, e2-medium, f1-micro, g1-small; https://cloud.google.com/compute/docs/general-purpose-machines),
# and a custom type SERIES-custom-VCPUS-MEMORY_MB[-ext], N1 without the series (custom-4-16384;
# https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type). A family and type
# without a size (e2-standard) names no machine.
CPU_MACHINE_TYPE = re.compile(
    r"^(?:[a-z][a-z0-9]*-(?:standard|highmem|highcpu|megamem|ultramem|hypermem)-\d+(?:-[a-z]+)?"
    r"|e2-(?:micro|small|medium)|f1-micro|g1-small"
    r"|(?:[a-z][a-z0-9]*-)?custom-\d+-\d+(?:-ext)?)$")
# Bucket names without dots (dotted names need domain verification): 3-63 characters.
BUCKET = re.compile(r"^[a-z0-9](?:[-_a-z0-9]{1,61})[a-z0-9]$")
BUCKET_MAX = 63
# Kubernetes DNS-1123 label (namespaces) and subdomain (service accounts).
DNS1123_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
# Kubernetes DNS-1035 label (KubeRay object names become Service names).
DNS1035_LABEL = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# IAM service account id: 6-30 characters.
SERVICE_ACCOUNT_MAX = 30
# Compute networks and subnetworks: RFC 1035, at most 63 characters.
COMPUTE_NAME_MAX = 63
# GKE node pools: at most 40 characters.
NODE_POOL_MAX = 40
# KubeRay: RayCluster names of at most 53 characters, RayJob names of at most 47 (KubeRay v1.7.0
# ray-operator/controllers/ray/utils/validation.go).
RAYCLUSTER_NAME_MAX = 53
RAYJOB_NAME_MAX = 47
# "-" + 8 hex characters of content hash appended to RayJob and JobSet names.
HASH_SUFFIX = 9
# JobSet name prefix: leaves room for "-smoke-" + hash and the pod hostnames (<= 63) JobSet derives.
JOBSET_PREFIX_MAX = 24
# The Pathways JobSet's head is its coordinator, and JobSet v0.12.0's webhook refuses a JobSet whose coordinator
# endpoint `<name>-pathways-head-0-0.<name>` is not a label value of at most 63 characters (jobset_webhook.go
# validateCoordinatorLabelValue): 2 x name + 19 <= 63. Tighter than the 28 MaxText's elastic-training guide gives.
PATHWAYS_NAME_MAX = 22


def fit(name: str, limit: int) -> str:
    """Shorten `name` to `limit` characters, keeping it unique with a hash of the full name."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: limit - 7].rstrip('-')}-{digest}"


def image_tag(image: str) -> str:
    """The tag of a container image reference ('' when untagged; a registry's port is not a tag, and a digest
    after the tag, REPO:TAG@sha256:..., is not part of it)."""
    image = image.split("@", 1)[0]
    return image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def bucket_problem(name: str) -> str | None:
    """Why a bucket name is refused, or None when it is fine."""
    if not BUCKET.match(name):
        return "3-63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit (no dots)"
    if name.startswith("goog") or "google" in name:
        return "names may not start with 'goog' or contain 'google'"
    return None


class Names:
    """Every physical name the stack uses, derived from the cluster name."""

    def __init__(self, cluster: str):
        self.cluster = cluster

    @property
    def network(self) -> str:
        return fit(f"{self.cluster}-net", COMPUTE_NAME_MAX)

    @property
    def subnet(self) -> str:
        return fit(f"{self.cluster}-nodes", COMPUTE_NAME_MAX)

    def dcn_network(self, index: int) -> str:
        return fit(f"{self.cluster}-dcn-{index}", COMPUTE_NAME_MAX)

    def dcn_subnet(self, index: int) -> str:
        return fit(f"{self.cluster}-dcn-{index}-sub", COMPUTE_NAME_MAX)

    def dcn_firewall(self, index: int) -> str:
        return fit(f"{self.cluster}-dcn-{index}-allow-internal", COMPUTE_NAME_MAX)

    def workload_policy(self, topology: str) -> str:
        return fit(f"{self.cluster}-{topology}", COMPUTE_NAME_MAX)

    @property
    def system_pool(self) -> str:
        return "system"

    def slice_pool(self, index: int) -> str:
        return fit(f"slice-{index}", NODE_POOL_MAX)

    @property
    def node_service_account(self) -> str:
        return fit(f"{self.cluster}-nodes", SERVICE_ACCOUNT_MAX)

    @property
    def build_service_account(self) -> str:
        """The account the worker image's Cloud Build runs as (one per cluster, like the nodes')."""
        return fit(f"{self.cluster}-builds", SERVICE_ACCOUNT_MAX)

    @property
    def pods_range(self) -> str:
        return "pods"

    @property
    def services_range(self) -> str:
        return "services"


class RunNames(Names):
    """The names of a run on a shared cluster (infra/config/stack_role.py), from its run stack's name: its slice
    pools and TPU7x workload policy, so two runs on one cluster never share one. The
    cluster's own names (network, node account) are the cluster stack's, which a run never creates."""

    def __init__(self, cluster: str, run: str):
        super().__init__(cluster)
        self.run = run

    def workload_policy(self, topology: str) -> str:
        return fit(f"{self.run}-{topology}", COMPUTE_NAME_MAX)

    def slice_pool(self, index: int) -> str:
        return fit(f"{self.run}-slice-{index}", NODE_POOL_MAX)
