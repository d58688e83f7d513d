"""TPU pods must fit what the node can allocate under the pool's SMT setting.

Sources: Compute Engine "Set the number of threads per core" (one thread per core halves the visible vCPUs);
GKE "Plan GKE Standard node sizes" resource reservations (the CPU and memory tiers in core/node_sizing.py);
Compute Engine machine-type listing for TPU VMs (ct6e-standard-4t: 180 vCPUs, 720 GiB).
"""
from __future__ import annotations

import pytest

from core.node_sizing import (gke_reserved_cpu, gke_reserved_memory_gib, node_capacity, threads_per_core,
                              visible_vcpus)
from core.tpu_catalog import CATALOG

MACHINES = [(g.name, m) for g in CATALOG.values() for m in g.machine_types]


@pytest.mark.parametrize("generation,machine", MACHINES, ids=[m.name for _, m in MACHINES])
def test_a_tpu_pod_ceiling_is_no_more_than_the_node_can_allocate(generation, machine):
    """The old sizing asked for 80 % of the full vCPU count: 144 CPU on a ct6e-standard-4t that shows 90."""
    capacity = node_capacity(machine)
    assert 0 < capacity.pod_cpu_ceiling <= capacity.allocatable_cpu <= visible_vcpus(machine)
    assert 0 < capacity.pod_memory_ceiling_gib <= capacity.allocatable_memory_gib <= 0.98 * machine.memory_gib


def test_smt_is_off_only_on_ct6e_and_halves_its_vcpus():
    ct6e = CATALOG["v6e"].machine("ct6e-standard-4t")
    assert threads_per_core(ct6e) == 1 and visible_vcpus(ct6e) == 90
    assert threads_per_core(CATALOG["v5e"].machine("ct5lp-hightpu-4t")) is None


def test_gke_reservation_tiers():
    # 4 vCPUs: 6 % + 1 % + 2 x 0.5 % = 0.08 cores; each core above 4 adds 0.25 %.
    assert gke_reserved_cpu(4) == pytest.approx(0.08)
    assert gke_reserved_cpu(90) == pytest.approx(0.08 + 86 * 0.0025)
    # 16 GiB: 1 + 0.8 + 0.8 GiB, plus the 100 MiB eviction threshold.
    assert gke_reserved_memory_gib(16) == pytest.approx(2.6 + 100 / 1024)
