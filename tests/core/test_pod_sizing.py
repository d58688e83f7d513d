"""TPU pods request what their job needs, never more than a real node can allocate.

The bound every request must stay under, per machine type of the TPU catalog (core/tpu_catalog.py):

    nominal memory x 0.98 - GKE's reservation - the DaemonSets' allowance

- 0.98: the kubelet's capacity is the kernel's MemTotal (cAdvisor reads /proc/meminfo), below the VM's nominal
  memory by at least the page map: one `struct page`, 64 bytes on x86_64 (include/linux/mm_types.h), per 4 KiB
  page = 1.56 % (FACTS §9 of this project's review notes);
- GKE's reservation: "Plan GKE Standard node sizes", resource reservations
  (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#resource_reservations): 25 % of the
  first 4 GiB, 20 % of the next 4, 10 % of the next 8, 6 % of the next 112, 2 % above 128 GiB, + 100 MiB eviction;
- the DaemonSets' allowance: 2 vCPU and 4 GiB (core/node_sizing.py; an assumption the offline plan shows).
CPU likewise: visible vCPUs (SMT off halves them: Compute Engine "Set the number of threads per core",
https://cloud.google.com/compute/docs/instances/set-threads-per-core) - GKE's CPU reservation - 2.

The old sizing requested the node itself: 87 CPU and 694 GiB on a ct6e-standard-4t (720 GiB), over the ~686 GiB a
real node has before its DaemonSets, so every TPU pod stayed Pending.
"""
from __future__ import annotations

import dataclasses

import pytest

from core.errors import PlanError
from core.memory import GIB
from core.node_sizing import (DAEMONSET_CPU, DAEMONSET_MEMORY_GIB, KERNEL_MEMTOTAL_FRACTION, gke_reserved_cpu,
                               gke_reserved_memory_gib, visible_vcpus)
from core.planner import PlanRequest, plan
from core.pod_sizing import HEADROOM, host_memory, tpu_pod_size
from core.presets import PRESETS
from core.tpu_catalog import CATALOG, slice_shape

PAGE_MAP_SHARE = 64 / 4096      # one 64-byte struct page per 4 KiB page


def memory_bound_gib(machine) -> float:
    capacity = machine.memory_gib * 0.98
    return capacity - gke_reserved_memory_gib(capacity) - DAEMONSET_MEMORY_GIB


def cpu_bound(machine) -> float:
    vcpus = visible_vcpus(machine)
    return vcpus - gke_reserved_cpu(vcpus) - DAEMONSET_CPU


def _catalog_plans():
    """Every preset's plan on every topology of every generation (each on the machine type that serves it), on
    one and two slices; what the planner refuses is left out (config build refuses it before sizing)."""
    for generation in CATALOG.values():
        for topology in generation.all_topologies():
            for name, model in PRESETS.items():
                if model.cpu_only:
                    continue
                for slices in (1, 2):
                    try:
                        chosen = plan(PlanRequest(model=name, generation=generation.name, topology=topology,
                                                  slices=slices))
                    except PlanError:
                        continue
                    yield chosen
                    # The same slice on the generation's other machine types that serve it (ct6e-standard-8t:
                    # 2x4 on one VM); the planner picks the multi-host one, a stack may set tpuMachineType.
                    for machine in generation.machine_types:
                        if machine is not chosen.shape.machine and topology in machine.single_host_topologies:
                            yield dataclasses.replace(chosen, shape=slice_shape(generation.name, topology,
                                                                                machine.name))


PLANS = list(_catalog_plans())


def test_the_bound_is_the_kernel_arithmetic():
    # The page map alone takes 1.56 %; 0.98 leaves the kernel image and boot-time reservations 0.44 % more.
    assert 0.98 < 1 - PAGE_MAP_SHARE and KERNEL_MEMTOTAL_FRACTION <= 0.98
    # ct6e-standard-4t: ~706 GiB MemTotal, ~21 GiB reserved by GKE, 4 for DaemonSets.
    ct6e = CATALOG["v6e"].machine("ct6e-standard-4t")
    assert 680 < memory_bound_gib(ct6e) < 681
    assert 694 > memory_bound_gib(ct6e), "the old request (the whole node) would fit: the bound is wrong"


def test_every_catalog_plan_requests_less_than_a_real_node_allocates():
    machines = {p.shape.machine.name for p in PLANS}
    assert len(PLANS) > 200 and machines == {m.name for g in CATALOG.values() for m in g.machine_types}
    for ray in (True, False):
        for chosen in PLANS:
            size = tpu_pod_size(chosen, ray=ray)
            machine = chosen.shape.machine
            where = f"{chosen.model.name} on {chosen.slices} x {chosen.shape.pod_type} ({machine.name}), ray={ray}"
            assert size.memory_request_gib <= size.memory_limit_gib <= memory_bound_gib(machine), where
            assert size.cpu_request <= size.cpu_limit <= cpu_bound(machine), where
            assert size.chips == chosen.shape.chips_per_host, where
            # Room to spare: the request covers the estimate with its headroom, whole GiB.
            assert size.memory_request_gib * GIB >= size.host.total * HEADROOM, where


def test_requests_follow_what_the_job_needs_not_the_node():
    """Two plans on the same machine type ask for different memory: offloading holds activations in the host."""
    by_model = {p.model.name: p for p in PLANS
                if p.shape.pod_type == "v6e-16" and p.slices == 2}
    llama = tpu_pod_size(by_model["llama3-8b"], ray=True)
    qwen = tpu_pod_size(by_model["qwen3-0.6b"], ray=True)
    assert by_model["llama3-8b"].remat_offload and not by_model["qwen3-0.6b"].remat_offload
    assert llama.host.offloaded_activations > 0 == qwen.host.offloaded_activations
    assert qwen.memory_request_gib < llama.memory_request_gib < llama.memory_limit_gib == qwen.memory_limit_gib
    # llama3-8b's tuned run (batch 3 x 8192 tokens, 32 layers): input, out, q, k, v = 14336 bf16 values per token
    # per layer go to the host, 21 GiB per chip, 84 GiB per 4-chip VM.
    assert llama.host.offloaded_activations == 4 * 3 * 8192 * 14336 * 32 * 2


def test_only_the_ray_backend_plans_ray_s_memory():
    chosen = PLANS[0]
    assert host_memory(chosen, ray=False).object_store == 0 == host_memory(chosen, ray=False).ray_processes
    assert tpu_pod_size(chosen, ray=False).object_store_gib is None
    assert tpu_pod_size(chosen, ray=True).object_store_gib > 0


def test_a_need_above_the_node_is_refused_naming_the_host_memory():
    """llama3-8b at per-device batch 12 on v5p fits HBM (its activations are offloaded) but not the host."""
    tuned = plan(PlanRequest(model="llama3-8b", generation="v5p", topology="2x2x2", slices=2))
    chosen = dataclasses.replace(tuned, per_device_batch_size=12)
    with pytest.raises(PlanError, match=r"host needs \d+ GiB of host memory .* at most 419 GiB"):
        tpu_pod_size(chosen, ray=True)
