"""What a TPU VM can give one pod at most: visible vCPUs under the pool's SMT setting and the kernel's view of the
VM's memory, minus GKE's reservation, minus what the node's own DaemonSets take. Pure arithmetic on the catalog's
machine types. These are ceilings (the pods' limits); what a pod requests is what its job needs (core/pod_sizing.py).

Sources:
- SMT: Compute Engine "Set the number of threads per core"
  (https://cloud.google.com/compute/docs/instances/set-threads-per-core): with one thread per core a VM shows half
  its vCPUs; memory is unchanged. The GKE multislice Ray tutorial creates ct6e pools with
  `--threads-per-core=1`; that is the only TPU machine family we can cite it for, so only ct6e pools disable SMT.
- GKE reservation: "Plan GKE Standard node sizes", resource reservations
  (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#resource_reservations): CPU 6 % of the
  first core, 1 % of the next, 0.5 % of the next 2, 0.25 % of any above 4; memory 25 % of the first 4 GiB, 20 % of
  the next 4, 10 % of the next 8, 6 % of the next 112, 2 % above 128 GiB, plus a 100 MiB eviction threshold.
  The tiers apply to the kubelet's memory capacity, which is the kernel's MemTotal (cAdvisor reads
  /proc/meminfo), not the machine type's nominal memory.
- Kernel MemTotal: below the VM's memory by what the kernel keeps for itself before userspace starts; the largest
  part is the page map, one `struct page` (64 bytes on x86_64, include/linux/mm_types.h) per 4 KiB page = 1.56 %,
  plus the kernel image and boot-time reservations. KERNEL_MEMTOTAL_FRACTION (0.98) is a bound taken from that
  arithmetic, not a measured figure: on a 720 GiB ct6e-standard-4t it leaves ~706 GiB, of which GKE reserves ~21.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.tpu_catalog import MachineType

# Machine families whose slice pools run one thread per core (see the module docstring).
SMT_OFF_PREFIXES = ("ct6e-",)
# Left for the node's DaemonSets (logging, metadata server, networking, TPU device plugin, GCS FUSE and DRANET
# agents). Not a published figure: a deliberate allowance, stated here so it can be reviewed.
DAEMONSET_CPU = 2.0
DAEMONSET_MEMORY_GIB = 4.0
EVICTION_THRESHOLD_GIB = 100 / 1024
# The share of the VM's nominal memory the kernel reports as MemTotal, at most (see the module docstring).
KERNEL_MEMTOTAL_FRACTION = 0.98


def threads_per_core(machine: MachineType) -> int | None:
    """1 where the stack turns SMT off; None leaves the machine's default."""
    return 1 if machine.name.startswith(SMT_OFF_PREFIXES) else None


def visible_vcpus(machine: MachineType) -> int:
    return machine.vcpus // 2 if threads_per_core(machine) == 1 else machine.vcpus


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...], rest: float) -> float:
    reserved, left = 0.0, amount
    for size, share in tiers:
        part = min(left, size)
        reserved += part * share
        left -= part
    return reserved + left * rest


def kernel_memory_gib(machine: MachineType) -> float:
    """The kubelet's memory capacity: the kernel's MemTotal, bounded from the nominal memory."""
    return machine.memory_gib * KERNEL_MEMTOTAL_FRACTION


def gke_reserved_cpu(vcpus: float) -> float:
    return _tiered(vcpus, ((1, 0.06), (1, 0.01), (2, 0.005)), 0.0025)


def gke_reserved_memory_gib(memory_gib: float) -> float:
    return _tiered(memory_gib, ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06)), 0.02) + EVICTION_THRESHOLD_GIB


@dataclass(frozen=True)
class NodeCapacity:
    allocatable_cpu: float
    allocatable_memory_gib: float

    @property
    def pod_cpu_ceiling(self) -> int:
        """Whole vCPUs one TPU pod may use at most: allocatable minus the DaemonSets' allowance."""
        return int(self.allocatable_cpu - DAEMONSET_CPU)

    @property
    def pod_memory_ceiling_gib(self) -> int:
        """Whole GiB one TPU pod may use at most: allocatable minus the DaemonSets' allowance."""
        return int(self.allocatable_memory_gib - DAEMONSET_MEMORY_GIB)


def node_capacity(machine: MachineType) -> NodeCapacity:
    vcpus = visible_vcpus(machine)
    memory = kernel_memory_gib(machine)
    return NodeCapacity(allocatable_cpu=vcpus - gke_reserved_cpu(vcpus),
                        allocatable_memory_gib=memory - gke_reserved_memory_gib(memory))
