"""What one TPU pod (one per TPU VM) requests and may use: the host memory and CPU its job needs, with room to
spare, under the ceiling of what the node can give (core/node_sizing.py). Pure arithmetic on a plan.

Requests are what the scheduler must find on a node; a pod that requests the node's last GiB stays Pending on the
first real node whose kernel or DaemonSets take a little more than computed. So a pod requests its job's need and
its limits are the ceiling: the job can still use the rest of the host, and Ray, which sizes itself from the
container's limits (Ray docs, "RayCluster Configuration": the CPU and memory limits are advertised to Ray,
requests are ignored), sees the host's real size. Ray's object store is set explicitly, so that 30 % of a large
limit (Ray's default) cannot grow into the memory the offloaded activations are planned in.

Host memory per TPU VM, all per host (devices_per_host JAX devices):
- offloaded activations: what the remat policy moves to pinned host memory between forward and backward
  (core/memory.py offloaded_bytes_per_device, the same tensors the HBM estimate leaves out);
- checkpoint staging: MaxText saves asynchronously (maxtext base.yml `async_checkpointing: true`): Orbax copies
  the host's shards of the parameters and optimizer state (the plan's params + optimizer per device) to host
  memory and writes them from there, at most `checkpoint_storage_device_host_concurrent_gb: 8` GB in flight
  (base.yml: "max concurrent GB allowed to be transferred from device to host memory at once when saving");
  budgeted as the smaller of the two;
- the data pipeline (Grain worker processes and their buffers: base.yml `grain_worker_count: 1`,
  `grain_per_worker_buffer_size: 1`; HF/TFDS readers): a fixed allowance;
- the training process itself (Python, JAX, libtpu's host runtime, MaxText; compiling the step: MaxText's ahead-of-
  time compile of llama3-8b peaked at 2.5-3.5 GiB RSS on this project's CPU machine): a fixed allowance;
- on the Ray backend, Ray's own processes (raylet, dashboard and runtime-env agents) and its object store, which
  carries only control messages and reported metrics (MaxText reads its data and writes its checkpoints itself).
The allowances are deliberate figures, stated here to be reviewed, not measurements on a TPU host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from core.errors import PlanError
from core.memory import GIB, MemoryEstimate, offloaded_bytes_per_device
from core.presets import ModelPreset
from core.tpu_catalog import SliceShape
from core.node_sizing import node_capacity


class Plan(Protocol):
    """What this module reads of a core.planner.Plan (named structurally: the planner may call this module, so it
    cannot import the planner back)."""

    model: ModelPreset
    shape: SliceShape
    slices: int
    min_slices: int
    per_device_batch_size: float
    max_target_length: int
    remat_policy: str
    remat_offload: tuple[str, ...]
    memory: MemoryEstimate

    def at_slices(self, slices: int) -> "Plan": ...

# MaxText base.yml checkpoint_storage_device_host_concurrent_gb (8 GB = 7.45 GiB), rounded up.
CHECKPOINT_STAGING_GIB = 8
PROCESS_GIB = 10
DATA_PIPELINE_GIB = 4
RAY_PROCESSES_GIB = 2
RAY_OBJECT_STORE_GIB = 2
# Room to spare on top of the estimate (its terms are upper bounds or allowances, not measurements).
HEADROOM = 1.25
# vCPUs: the training process (Python dispatch, libtpu/XLA host threads, Orbax and TensorStore I/O), the data
# pipeline (Grain workers), Ray's processes. Requests only; the limit is the node's ceiling, so the job can use
# every vCPU of the host.
PROCESS_CPU = 4
DATA_PIPELINE_CPU = 2
RAY_CPU = 2


@dataclass(frozen=True)
class HostMemory:
    """Bytes one TPU VM's pod needs, by what needs them."""

    offloaded_activations: int
    checkpoint_staging: int
    data_pipeline: int
    process: int
    ray_processes: int
    object_store: int

    @property
    def total(self) -> int:
        return (self.offloaded_activations + self.checkpoint_staging + self.data_pipeline + self.process
                + self.ray_processes + self.object_store)

    def describe(self) -> str:
        parts = [("offloaded activations", self.offloaded_activations),
                 ("checkpoint staging", self.checkpoint_staging), ("data pipeline", self.data_pipeline),
                 ("training process", self.process), ("Ray", self.ray_processes),
                 ("Ray object store", self.object_store)]
        return " + ".join(f"{name} {value / GIB:.1f}" for name, value in parts if value) + \
            f" = {self.total / GIB:.1f} GiB"


@dataclass(frozen=True)
class TpuPodSize:
    """Requests and limits of one TPU pod (the TPU resource is always the VM's whole chip count, request = limit)."""

    chips: int
    cpu_request: int
    cpu_limit: int
    memory_request_gib: int
    memory_limit_gib: int
    object_store_gib: int | None    # Ray's --object-store-memory; None without Ray
    host: HostMemory

    def requests(self, tpu_resource: str) -> dict[str, str]:
        return {tpu_resource: str(self.chips), "cpu": str(self.cpu_request), "memory": f"{self.memory_request_gib}Gi"}

    def limits(self, tpu_resource: str) -> dict[str, str]:
        return {tpu_resource: str(self.chips), "cpu": str(self.cpu_limit), "memory": f"{self.memory_limit_gib}Gi"}


def host_memory(plan: Plan, ray: bool) -> HostMemory:
    """What one host of `plan` needs, at the slice count of the run that needs most (an elastic run on fewer
    slices holds more state per device when FSDP spans the slices)."""
    counts = range(plan.min_slices, plan.slices + 1)
    per_device_state = max(p.memory.params + p.memory.optimizer
                           for p in (plan.at_slices(n) for n in counts))
    devices = plan.shape.devices_per_host
    offloaded = offloaded_bytes_per_device(plan.model, plan.per_device_batch_size, plan.max_target_length,
                                           plan.remat_policy, plan.remat_offload)
    return HostMemory(
        offloaded_activations=devices * offloaded,
        checkpoint_staging=min(devices * per_device_state, CHECKPOINT_STAGING_GIB * GIB),
        data_pipeline=DATA_PIPELINE_GIB * GIB,
        process=PROCESS_GIB * GIB,
        ray_processes=RAY_PROCESSES_GIB * GIB if ray else 0,
        object_store=RAY_OBJECT_STORE_GIB * GIB if ray else 0,
    )


def tpu_pod_size(plan: Plan, ray: bool) -> TpuPodSize:
    """The pod's requests (need x HEADROOM) and limits (the node's ceiling); PlanError when the need with its
    headroom does not fit under the ceiling of the plan's machine type."""
    machine = plan.shape.machine
    capacity = node_capacity(machine)
    host = host_memory(plan, ray)
    memory = math.ceil(host.total * HEADROOM / GIB)
    cpu = math.ceil((PROCESS_CPU + DATA_PIPELINE_CPU + (RAY_CPU if ray else 0)) * HEADROOM)
    if memory > capacity.pod_memory_ceiling_gib:
        raise PlanError(f"one {machine.name} host needs {memory} GiB of host memory ({host.describe()}, "
                        f"+{HEADROOM - 1:.0%} headroom) but a pod can have at most "
                        f"{capacity.pod_memory_ceiling_gib} GiB of its {machine.memory_gib} GiB "
                        "(kernel, GKE's reservation and the node's DaemonSets take the rest); lower the per-device "
                        "batch: the offloaded activations grow with it")
    return TpuPodSize(chips=plan.shape.chips_per_host,
                      cpu_request=min(cpu, capacity.pod_cpu_ceiling), cpu_limit=capacity.pod_cpu_ceiling,
                      memory_request_gib=memory, memory_limit_gib=capacity.pod_memory_ceiling_gib,
                      object_store_gib=RAY_OBJECT_STORE_GIB if ray else None, host=host)
