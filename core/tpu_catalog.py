"""The one TPU catalog: a row per generation, every slice shape derived from it.

Pure Python (no Pulumi import) so the trainer's planner and the offline plan can use it too.

Sources (read 2026-11):
- GKE "Plan TPUs in GKE" (cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus): accelerator
  labels, machine types, chips per VM, single-host and multi-host topologies, minimum GKE versions.
- Cloud TPU system architecture pages (cloud.google.com/tpu/docs/v4, v5e, v5p, v6e, tpu7x): HBM per
  chip and peak bf16 TFLOP/s per chip.
- Compute Engine accelerator-optimized machine family (cloud.google.com/compute/docs/accelerator-optimized-machines):
  vCPUs and memory per TPU VM, used to size pod requests.
Hosts per slice and chips per slice are never stored: they are computed from the topology.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

# The TPU vocabulary of Kubernetes on GKE ("Plan TPUs in GKE", cloud.google.com/kubernetes-engine/docs/concepts/
# plan-tpus): the extended resource the TPU device plugin advertises, and the node labels of every TPU node.
TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"


@dataclass(frozen=True)
class MachineType:
    name: str
    chips_per_vm: int
    vcpus: int
    memory_gib: int
    # Topologies this machine type serves as a *single-host* slice (one VM holds the whole slice).
    single_host_topologies: tuple[str, ...] = ()
    # Whether multi-host slices are built from this machine type (GKE allows it only on one type per generation).
    multi_host: bool = False


@dataclass(frozen=True)
class Generation:
    name: str                      # short name used in config, e.g. "v6e"
    accelerator_label: str         # value of the cloud.google.com/gke-tpu-accelerator node label
    ray_accelerator_type: str      # Ray's accelerator_type string for ScalingConfig / node resources
    pod_type_prefix: str           # prefix of the TPU pod type name, e.g. "v6e" in "v6e-16"
    # TensorCores per chip: TPU pod type names count cores, not chips (v4/v5p/TPU7x have two per chip; Ray's
    # infer_tpu_pod_type_from_topology and Cloud TPU accelerator types agree, e.g. v4 2x2x2 = "v4-16").
    cores_per_chip: int
    # JAX devices per chip: what jax.device_count() counts and what a MaxText mesh is laid out over. v4 and
    # v5p run their two TensorCores as one "megacore" device; TPU7x exposes each of its two cores as a device
    # (MaxText src/maxtext/utils/accelerator_to_spec_map.py @e591f30c: "tpu7x: two cores per chip", and its
    # tpu7x-8 entry is a 2x2x1 slice of 4 chips with 8 devices_per_slice; its v4-16 and v5p-16 entries are
    # 2x2x2 "megacore" slices of 8 chips with 8 devices).
    devices_per_chip: int
    machine_types: tuple[MachineType, ...]
    multi_host_topologies: tuple[str, ...]
    hbm_gib_per_chip: int
    peak_bf16_tflops_per_chip: float
    min_gke_version: str
    # TPU7x multi-host pools are placed with a workload policy (compute ResourcePolicy) instead of
    # node-pool tpu_topology (docs/platform-notes.md §4).
    uses_workload_policy: bool = False

    @property
    def dimensions(self) -> int:
        return len(self.multi_host_topologies[0].split("x"))

    def machine(self, name: str) -> MachineType:
        for machine in self.machine_types:
            if machine.name == name:
                return machine
        raise KeyError(name)

    @property
    def multi_host_machine(self) -> MachineType:
        return next(m for m in self.machine_types if m.multi_host)

    def all_topologies(self) -> tuple[str, ...]:
        single = [t for m in self.machine_types for t in m.single_host_topologies]
        return tuple(dict.fromkeys(single + list(self.multi_host_topologies)))


_3D_MULTI_HOST = ("2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16",
                  "8x16x16", "16x16x16")

CATALOG: Mapping[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            name="v4",
            cores_per_chip=2,
            devices_per_chip=1,
            accelerator_label="tpu-v4-podslice",
            ray_accelerator_type="TPU-V4",
            pod_type_prefix="v4",
            machine_types=(MachineType("ct4p-hightpu-4t", 4, 240, 407, ("2x2x1",), multi_host=True),),
            multi_host_topologies=_3D_MULTI_HOST,
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=275.0,
            min_gke_version="1.26.1-gke.1500",
        ),
        Generation(
            name="v5e",
            cores_per_chip=1,
            devices_per_chip=1,
            accelerator_label="tpu-v5-lite-podslice",
            ray_accelerator_type="TPU-V5LITEPOD",
            pod_type_prefix="v5litepod",
            machine_types=(
                MachineType("ct5lp-hightpu-1t", 1, 24, 48, ("1x1",)),
                MachineType("ct5lp-hightpu-4t", 4, 112, 192, ("2x2",), multi_host=True),
                MachineType("ct5lp-hightpu-8t", 8, 224, 384, ("2x4",)),
            ),
            multi_host_topologies=("4x4", "4x8", "8x8", "8x16", "16x16"),
            hbm_gib_per_chip=16,
            peak_bf16_tflops_per_chip=197.0,
            min_gke_version="1.27.2-gke.2100",
        ),
        Generation(
            name="v5p",
            cores_per_chip=2,
            devices_per_chip=1,
            accelerator_label="tpu-v5p-slice",
            ray_accelerator_type="TPU-V5P",
            pod_type_prefix="v5p",
            machine_types=(MachineType("ct5p-hightpu-4t", 4, 208, 448, ("2x2x1",), multi_host=True),),
            multi_host_topologies=_3D_MULTI_HOST[:7] + ("8x8x16", "8x16x16", "16x16x16", "16x16x24"),
            hbm_gib_per_chip=95,
            peak_bf16_tflops_per_chip=459.0,
            min_gke_version="1.28.3-gke.1024000",
        ),
        Generation(
            name="v6e",
            cores_per_chip=1,
            devices_per_chip=1,
            accelerator_label="tpu-v6e-slice",
            ray_accelerator_type="TPU-V6E",
            pod_type_prefix="v6e",
            machine_types=(
                MachineType("ct6e-standard-1t", 1, 44, 176, ("1x1",)),
                MachineType("ct6e-standard-4t", 4, 180, 720, ("2x2",), multi_host=True),
                MachineType("ct6e-standard-8t", 8, 180, 1440, ("2x4",)),
            ),
            # 2x4 is multi-host (2 VMs) on the 4-chip machine and single-host on the 8-chip one.
            multi_host_topologies=("2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=918.0,
            min_gke_version="1.31.2-gke.1115000",
        ),
        Generation(
            name="tpu7x",
            cores_per_chip=2,
            devices_per_chip=2,
            accelerator_label="tpu7x",
            ray_accelerator_type="TPU-V7X",
            pod_type_prefix="v7x",
            machine_types=(MachineType("tpu7x-standard-4t", 4, 224, 960, ("2x2x1",), multi_host=True),),
            multi_host_topologies=_3D_MULTI_HOST[:7] + ("8x8x16", "8x16x16"),
            hbm_gib_per_chip=192,
            peak_bf16_tflops_per_chip=2307.0,
            min_gke_version="1.34.0-gke.2201000",
            uses_workload_policy=True,
        ),
    )
}

_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")


def chips_in(topology: str) -> int:
    """Number of chips in a topology string such as '4x4' or '2x2x4'."""
    if not _TOPOLOGY.match(topology):
        raise ValueError(f"not a topology: {topology!r}")
    return math.prod(int(d) for d in topology.split("x"))


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: generation + topology + machine type. Everything else is derived."""

    generation: Generation
    topology: str
    machine: MachineType

    @property
    def chips(self) -> int:
        return chips_in(self.topology)

    @property
    def chips_per_host(self) -> int:
        return self.machine.chips_per_vm

    @property
    def hosts(self) -> int:
        return self.chips // self.machine.chips_per_vm

    @property
    def devices(self) -> int:
        """JAX devices in the slice (chips x devices per chip): the size of the slice's ICI mesh."""
        return self.chips * self.generation.devices_per_chip

    @property
    def devices_per_host(self) -> int:
        return self.chips_per_host * self.generation.devices_per_chip

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def hbm_gib(self) -> int:
        return self.chips * self.generation.hbm_gib_per_chip

    @property
    def peak_bf16_tflops(self) -> float:
        return self.chips * self.generation.peak_bf16_tflops_per_chip

    @property
    def pod_type(self) -> str:
        """TPU pod type name as Ray and Cloud TPU spell it (TensorCores, not chips), e.g. 'v6e-16', 'v4-16'
        for a 2x2x2 v4 slice."""
        return f"{self.generation.pod_type_prefix}-{self.chips * self.generation.cores_per_chip}"


class CatalogError(ValueError):
    """A generation/topology/machine combination that the catalog does not allow."""

    def __init__(self, key: str, value: object, allowed: Iterable[str]):
        self.key, self.value, self.allowed = key, value, tuple(allowed)
        super().__init__(f"{key}={value!r} is not valid; allowed: {', '.join(self.allowed)}")


def generation(name: str) -> Generation:
    try:
        return CATALOG[name]
    except KeyError:
        raise CatalogError("tpuGeneration", name, CATALOG) from None


def slice_shape(generation_name: str, topology: str, machine_type: str | None = None) -> SliceShape:
    """Resolve a slice. Without a machine type, multi-host topologies use the multi-host machine type
    and single-host topologies the machine type that serves them."""
    gen = generation(generation_name)
    if machine_type is not None:
        try:
            machine = gen.machine(machine_type)
        except KeyError:
            raise CatalogError("tpuMachineType", machine_type, (m.name for m in gen.machine_types)) from None
        allowed = machine.single_host_topologies + (gen.multi_host_topologies if machine.multi_host else ())
        if topology not in allowed:
            raise CatalogError("tpuTopology", topology, allowed)
        return SliceShape(gen, topology, machine)
    if topology in gen.multi_host_topologies:
        return SliceShape(gen, topology, gen.multi_host_machine)
    for machine in gen.machine_types:
        if topology in machine.single_host_topologies:
            return SliceShape(gen, topology, machine)
    raise CatalogError("tpuTopology", topology, gen.all_topologies())
