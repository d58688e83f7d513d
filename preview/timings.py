"""Typical creation and deletion times per resource type, for the plan's critical-path estimate.

Figures are seconds for one resource operation as the provider waits for it. Each row says where it
comes from; most are GUESSES (order of magnitude from experience with Google Cloud APIs, not measured
here: nothing in this project can reach a cloud). The sources:
- docs/platform-notes.md §4: GKE cluster creation takes several minutes, 2.5-9.5 min in public logs; GKE creates node
  pools of one cluster concurrently (the provider retries "incompatible operation" conflicts; xpk creates
  up to 100 pools at once). So slice pools run in parallel and the critical path does not grow with slices.
- Pulumi runs independent operations in parallel: `pulumi up --parallel` defaults to unbounded
  (pulumi CLI reference, "Defaults to unbounded (2147483647)").
Unknown resource types get DEFAULT (a guess) and are marked as such in the plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.slice_wait import SLICE_START_S
from core.tpu_catalog import CATALOG


@dataclass(frozen=True)
class Timing:
    create_s: float
    delete_s: float
    basis: str          # "docs/platform-notes.md §4 ..." or "guess"

    @property
    def is_guess(self) -> bool:
        return self.basis.startswith("guess")


INSTANT = Timing(0, 0, "no cloud operation (component, provider or stack-only record)")
DEFAULT = Timing(10, 10, "guess: unknown resource type")

# Cluster: 6 min typical inside the public 2.5-9.5 min range (docs/platform-notes.md §4); the bootstrap pool that
# remove_default_node_pool deletes is part of the same operation.
CLUSTER = Timing(360, 300, "docs/platform-notes.md §4: 2.5-9.5 min in public logs (create); delete is a guess")
# The same start-up figure sizes how long a JobSet waits for a slice that comes up late (core/slice_wait.py).
TPU_NODE_POOL = Timing(SLICE_START_S, 240, "guess: multi-host TPU pools provision several VMs at once; pools of "
                                           "one cluster are created concurrently (docs/platform-notes.md §4)")
CPU_NODE_POOL = Timing(150, 150, "guess")

BY_TYPE: dict[str, Timing] = {
    "gcp:projects/service:Service": Timing(40, 2, "guess: enabling an API; this stack never disables "
                                                  "them on destroy (disable_on_destroy=False)"),
    "gcp:compute/network:Network": Timing(25, 25, "guess"),
    "gcp:compute/subnetwork:Subnetwork": Timing(25, 25, "guess"),
    "gcp:compute/firewall:Firewall": Timing(12, 12, "guess"),
    "gcp:compute/router:Router": Timing(15, 15, "guess"),
    "gcp:compute/routerNat:RouterNat": Timing(25, 25, "guess"),
    "gcp:compute/resourcePolicy:ResourcePolicy": Timing(15, 15, "guess"),
    "gcp:serviceaccount/account:Account": Timing(5, 3, "guess"),
    "gcp:projects/iAMMember:IAMMember": Timing(10, 10, "guess: read-modify-write of the project IAM policy"),
    "gcp:storage/bucket:Bucket": Timing(3, 5, "guess (force-destroy of many objects takes longer)"),
    "gcp:storage/bucketIAMMember:BucketIAMMember": Timing(5, 5, "guess"),
    "gcp:container/cluster:Cluster": CLUSTER,
    # The workers' image (workerEnvironment=image), built when the build context changes: pull the Ray base
    # image, install the lock's ~740 MB of wheels, push a multi-GB layer. Nothing to delete (the repository's
    # cleanup policy removes old images).
    "command:local:Command": Timing(600, 0, "guess: a Cloud Build of the workers' image on E2_HIGHCPU_8 "
                                           "(base pull, lock install, push); an unchanged lock skips it"),
    "docker-build:index:Image": Timing(900, 0, "guess: a local BuildKit build and push of the workers' image; "
                                               "the push leaves this machine; an unchanged lock skips it"),
    # Kubernetes objects: the API server answers in about a second; pulumi-kubernetes does not wait for
    # custom resources to become ready. Namespace deletion waits for its finalizers.
    "kubernetes:core/v1:Namespace": Timing(1, 15, "guess"),
}
KUBERNETES_OBJECT = Timing(1, 2, "guess: one API-server round trip")

_TPU_MACHINE_TYPES = frozenset(m.name for g in CATALOG.values() for m in g.machine_types)


def is_tpu_node_pool(type_token: str, inputs: Mapping[str, Any]) -> bool:
    machine = ((inputs.get("nodeConfig") or {}).get("machineType")) or ""
    return type_token == "gcp:container/nodePool:NodePool" and machine in _TPU_MACHINE_TYPES


def timing_for(type_token: str, inputs: Mapping[str, Any], custom: bool) -> Timing:
    """How long creating and deleting one registered resource takes, typically."""
    if not custom or type_token.startswith("pulumi:providers:"):
        return INSTANT
    if type_token == "gcp:container/nodePool:NodePool":
        return TPU_NODE_POOL if is_tpu_node_pool(type_token, inputs) else CPU_NODE_POOL
    if type_token in BY_TYPE:
        return BY_TYPE[type_token]
    if type_token.startswith("kubernetes:"):
        return KUBERNETES_OBJECT
    return DEFAULT
