"""What a stack costs per hour while it trains and while it idles, and when its slices are released.

TPU chip-hours come from preview/prices.py. The CPU node pool (system pods, the Ray head, the Pathways head) is
priced from Compute Engine's list prices below; GKE's cluster management fee is shown apart. The disks of
Cloud Storage FUSE's file cache (one per pod that reads data, workloads/fuse_cache.py) bill while the run's pods
exist. Boot disks, network, Cloud Storage and logging are not included. Idle means no job runs: TPU pools that
may scale to zero hold no VM then (GKE removes a slice pool's nodes once no pod needs them, after its scale-down
delay), so the idle TPU cost is what the warm pools (config warmSlices) keep.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from infra.config import Capacity, StackConfig
from preview import prices as tpu_prices
from workloads import fuse_cache, shared_queue
from workloads.backends import backend_for
from workloads.common import data_buckets

# Compute Engine on-demand list prices per VM-hour in us-central1 (https://cloud.google.com/compute/vm-instance-pricing,
# E2 and N2 predefined machine types, as published in 2025; not re-checked offline). Regions differ.
CPU_MACHINE_USD_PER_HOUR: dict[str, float] = {
    "e2-standard-4": 0.134,
    "e2-standard-8": 0.268,
    "e2-standard-16": 0.536,
    "e2-standard-32": 1.072,
    "n2-standard-16": 0.777,
    "n2-standard-32": 1.554,
    "n2-standard-64": 3.108,
    "n2-highmem-64": 4.192,
}
CPU_PRICE_SOURCE = "https://cloud.google.com/compute/vm-instance-pricing (us-central1 list prices, 2025)"
# GKE cluster management fee per cluster-hour (Standard and Autopilot); the free tier credits one zonal or
# Autopilot cluster per billing account (https://cloud.google.com/kubernetes-engine/pricing).
GKE_FEE_USD_PER_HOUR = 0.10
# GKE's cluster autoscaler removes a node once it has been unneeded for 10 minutes by default
# (https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler, "scale-down-unneeded-time").
SCALE_DOWN_MINUTES = 10


@dataclass(frozen=True)
class PoolCost:
    name: str
    machine_type: str
    idle_nodes: int
    max_nodes: int
    usd_per_node_hour: float | None
    tpu_chips_per_vm: int = 0        # 0: a CPU pool


@dataclass
class CostSummary:
    capacity: str
    tpu_training_usd_per_hour: float | None
    tpu_idle_usd_per_hour: float | None
    system_usd_per_hour: float | None            # None: unknown machine type, or Autopilot (bills pod requests)
    gke_fee_usd_per_hour: float
    warm_chips: int
    released: str                                 # when the slices go back to zero
    notes: list[str] = field(default_factory=list)
    # The FUSE file cache disks while the run's pods exist (0: no data mounted; None: unpriced disk type).
    data_cache_usd_per_hour: float | None = 0.0

    @staticmethod
    def _total(*parts: float | None) -> float | None:
        return None if any(part is None for part in parts) else round(sum(parts), 2)

    @property
    def training_usd_per_hour(self) -> float | None:
        return self._total(self.tpu_training_usd_per_hour, self.system_usd_per_hour, self.gke_fee_usd_per_hour,
                           self.data_cache_usd_per_hour)

    @property
    def idle_usd_per_hour(self) -> float | None:
        return self._total(self.tpu_idle_usd_per_hour, self.system_usd_per_hour, self.gke_fee_usd_per_hour)

    def as_dict(self) -> dict[str, Any]:
        return {"per_hour": {
                    "training_usd": self.training_usd_per_hour, "idle_usd": self.idle_usd_per_hour,
                    "tpu_training_usd": self.tpu_training_usd_per_hour, "tpu_idle_usd": self.tpu_idle_usd_per_hour,
                    "system_pool_usd": self.system_usd_per_hour, "gke_fee_usd": self.gke_fee_usd_per_hour,
                    "data_cache_usd": self.data_cache_usd_per_hour},
                "warm_chips": self.warm_chips, "slices_released": self.released, "cost_notes": self.notes,
                "cpu_price_source": CPU_PRICE_SOURCE}


def capacity_usd_per_hour(estimate: tpu_prices.HourlyEstimate, capacity: Capacity) -> float | None:
    """The estimate's hourly price for the stack's capacity: spot at the assumed Spot price, everything else at
    the on-demand list price."""
    return estimate.spot_usd_per_hour if capacity is Capacity.SPOT else estimate.on_demand_usd_per_hour


CAPACITY_NOTES = {
    Capacity.FLEX_START: "flex-start is priced at on-demand here (an upper bound; no flex-start table)",
    Capacity.RESERVATION: ("the reservation bills its chips whether nodes run or not; the idle figure counts only "
                           "the warm pools"),
}


def _released(config: StackConfig, warm_slices: int) -> str:
    when = backend_for(config).slices_released
    if config.cluster.autopilot:
        return f"{when}; Autopilot then removes the TPU nodes"
    kept = f"; {warm_slices} warm slice(s) stay" if warm_slices else ""
    return f"{when}; GKE removes the slice nodes ~{SCALE_DOWN_MINUTES} min later{kept}"


def cost_summary(pools: list[PoolCost], config: StackConfig) -> CostSummary:
    generation, capacity = config.tpu.shape.generation.name, config.tpu.capacity
    notes = [CAPACITY_NOTES[capacity]] if capacity in CAPACITY_NOTES else []
    tpu_pools = [p for p in pools if p.tpu_chips_per_vm]
    cpu_pools = [p for p in pools if not p.tpu_chips_per_vm]
    if tpu_pools:
        chips = sum(p.max_nodes * p.tpu_chips_per_vm for p in tpu_pools)
        warm_chips = sum(p.idle_nodes * p.tpu_chips_per_vm for p in tpu_pools)
        warm_slices = sum(1 for p in tpu_pools if p.idle_nodes)
    elif not config.stack.has_run:   # a shared cluster: its runs' stacks own and price the slices
        chips, warm_chips, warm_slices = 0, 0, 0
    else:   # Autopilot: TPU nodes exist only while pods ask for them
        chips, warm_chips, warm_slices = config.tpu.total_chips, 0, 0
    tpu_training = capacity_usd_per_hour(tpu_prices.hourly_estimate(generation, chips), capacity)
    tpu_idle = (0.0 if warm_chips == 0
                else capacity_usd_per_hour(tpu_prices.hourly_estimate(generation, warm_chips), capacity))
    if config.cluster.autopilot:
        system = None
        notes.append("Autopilot bills the CPU pods' requests (Ray head, controllers); not estimated")
    else:
        prices = [p.usd_per_node_hour for p in cpu_pools]
        system = None if any(p is None for p in prices) else round(
            sum(p.idle_nodes * p.usd_per_node_hour for p in cpu_pools), 2)
        unknown = sorted({p.machine_type for p in cpu_pools if p.usd_per_node_hour is None})
        if unknown:
            notes.append(f"no list price here for {', '.join(unknown)}: system pool cost unknown")
    notes += backend_for(config).capacity_wait_notes(config) if config.stack.has_run else []
    notes += shared_queue.cost_notes(config)
    cache, cache_note = data_cache_cost(config)
    notes += [cache_note] if cache_note else []
    notes += worker_image_cost_notes(config)
    return CostSummary(capacity=capacity.value, tpu_training_usd_per_hour=tpu_training, tpu_idle_usd_per_hour=tpu_idle,
                       system_usd_per_hour=system, warm_chips=warm_chips,
                       # A run on a shared cluster pays neither: the cluster stack does, once for every run.
                       gke_fee_usd_per_hour=0.0 if config.stack.run else GKE_FEE_USD_PER_HOUR,
                       released=_released(config, warm_slices), notes=notes, data_cache_usd_per_hour=cache)


def worker_image_cost_notes(config: StackConfig) -> list[str]:
    """The built image bills while it is stored, idle included, and each build bills its minutes."""
    if config.worker_image is None:
        return []
    from preview.startup import image_host, load_results
    from preview.timings import BY_TYPE

    layer = image_host(load_results())
    stored = "the Ray base image" if layer is None else (
        f"the lock's layer (at most {layer[0] / 1e9:.2f} GB, measured: "
        f"{max(0.0, layer[0] / 1e9 - tpu_prices.ARTIFACT_REGISTRY_FREE_GB) * tpu_prices.ARTIFACT_REGISTRY_USD_PER_GB_MONTH:.2f}"
        " USD per month above the free 0.5 GB) + the Ray base image (size not known offline)")
    notes = [f"worker images bill while stored, idle included: {tpu_prices.ARTIFACT_REGISTRY_USD_PER_GB_MONTH:.2f} "
             f"USD per GB-month ({tpu_prices.ARTIFACT_REGISTRY_SOURCE}) for {stored}; the newest 5 are kept, "
             "sharing unchanged layers; same-region pulls are free"]
    if config.worker_image.builder == "cloud-build":
        minutes = BY_TYPE["command:local:Command"].create_s / 60
        notes.append(f"each build of the worker image (a change of the lock or the Dockerfile): ~{minutes:.0f} min "
                     f"on E2_HIGHCPU_8 (a guess) at {tpu_prices.CLOUD_BUILD_E2_HIGHCPU_8_USD_PER_MINUTE} USD per "
                     f"build-minute = ~{minutes * tpu_prices.CLOUD_BUILD_E2_HIGHCPU_8_USD_PER_MINUTE:.2f} USD "
                     f"({tpu_prices.CLOUD_BUILD_SOURCE})")
    notes += change_cost_notes(config, layer)
    return notes


def change_cost_notes(config: StackConfig, layer: tuple[int, float] | None) -> list[str]:
    """What a code edit and a lock change each cost with the built image: the code is not in the image (it
    travels in the job's ConfigMap), so only the lock (or the Dockerfile) builds, pushes and is pulled again."""
    from workloads.bundle import load_bundle

    code_kb = sum(len(text.encode()) for text in load_bundle().files.values()) / 1e3
    hosts = config.tpu.total_hosts
    notes = [f"a code edit (core/, trainer/): no build, push or pull; the job's ConfigMap (~{code_kb:.0f} kB) is "
             "replaced and the job restarts with it: 0 USD beyond the restart"]
    if layer is None:
        return notes
    gb = layer[0] / 1e9
    image = config.worker_image
    build_region = image.build_region if image and image.build_region else config.gcp.region
    if build_region == config.gcp.region:
        push = f"its push of <= {gb:.2f} GB stays in {config.gcp.region} (free)"
    else:
        push = (f"its push of <= {gb:.2f} GB crosses from {build_region} to the repository in "
                f"{config.gcp.region}: ~{gb * tpu_prices.INTER_REGION_USD_PER_GB:.2f} USD at "
                f"{tpu_prices.INTER_REGION_USD_PER_GB} USD/GB (assumed); the pulls stay in-region")
    builds = "one build (above)" if image and image.builder == "cloud-build" else "one local build"
    notes.append(f"a lock change: {builds}; {push}; then each of the {hosts} TPU host(s) pulls the new layer "
                 f"(<= {hosts * gb:.2f} GB in all, free in-region) at its next start")
    return notes


# Regional Compute Engine disk quotas the FUSE cache disks count against (Compute Engine "Disk quotas",
# https://cloud.google.com/compute/resource-usage#disk_quota): Balanced and SSD Persistent Disk share
# "Persistent Disk SSD (GB)", metric SSD_TOTAL_GB (a Compute API Quota.metric value); Hyperdisk Balanced has a
# capacity quota of its own, whose id was not read here (assumed name).
DISK_QUOTAS = {"pd-balanced": "SSD_TOTAL_GB (Persistent Disk SSD, GB)",
               "hyperdisk-balanced": "Hyperdisk Balanced capacity (GB; quota id not read here, assumed)"}


def data_cache_quota(config: StackConfig) -> str | None:
    """The regional disk quota the run's cache disks need at their most (one per data-reading pod), or None when
    the run mounts no data."""
    if not data_buckets(config):
        return None
    on_tpu = backend_for(config).data_on_tpu_hosts
    disks = config.tpu.slices * config.tpu.shape.hosts if on_tpu else 1
    kind, gib = fuse_cache.disk_type(config, on_tpu), config.workload.run.data_cache_gib
    total_gb = math.ceil(disks * gib * 2**30 / 1e9)
    return (f"disk quota to have: {total_gb} GB of {kind} in {config.gcp.region} ({disks} data cache "
            f"disk(s) of {gib} GiB)\n    quota: {DISK_QUOTAS.get(kind, kind)}")


def data_cache_cost(config: StackConfig) -> tuple[float | None, str]:
    """USD per hour of the FUSE file cache disks while the run's pods exist, and where they are (a note for the
    plan); (0.0, "") when the run mounts no data. One disk per pod that reads data: every TPU host of every slice
    (at the most slices), or the one Pathways head."""
    if not data_buckets(config):
        return 0.0, ""
    on_tpu = backend_for(config).data_on_tpu_hosts
    disks = config.tpu.slices * config.tpu.shape.hosts if on_tpu else 1
    kind, gib = fuse_cache.disk_type(config, on_tpu), config.workload.run.data_cache_gib
    usd = tpu_prices.disk_usd_per_hour(kind, gib, disks)
    price = "unpriced" if usd is None else f"{usd:,.2f} USD/h" + (
        " (price assumed)" if kind in tpu_prices.DISK_PRICE_ASSUMED else "")
    where = "TPU host" if on_tpu else "Pathways head"
    return usd, (f"data cache: {disks} x {gib} GiB {kind}, one per {where}, made and deleted with its pod: "
                 f"{price} while the run's pods exist, nothing idle (dataCacheGiB)")
