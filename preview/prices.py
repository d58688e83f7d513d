"""Estimated TPU prices per chip-hour, next to the catalog (infra/tpu_catalog.py) whose generations they price.

Source of the on-demand figures: Cloud TPU pricing, https://cloud.google.com/tpu/pricing, list prices per
chip-hour in US regions (us-central1 / us-east5 / us-east1), as published in 2025. The offline copy of
that page this project could consult on 2026-11-21 predates v5e, so these figures were not re-checked
then; a third-party page read the same day still quotes v5e at 1.20 USD per chip-hour
(peakinfer.com, "What TPU economics look like in practice"). Prices differ by region and change.

Spot figures are ASSUMPTIONS: Spot prices are dynamic and not stable list prices. Each is 40 % of the
on-demand price, i.e. the smallest discount of the 60-91 % range Compute Engine documents for Spot VMs
(cloud.google.com/compute/docs/instances/spot), so the spot estimate errs high.
TPU7x (Ironwood) has no public per-chip price in these sources: its estimate is reported as unknown.
Only the TPU VMs are priced here, and the disks that hold Cloud Storage FUSE's file cache (DISK_PRICES below);
the GKE fee and CPU nodes are priced in preview/costs.py; boot disks, network and storage are not included.
"""
from __future__ import annotations

from dataclasses import dataclass

SOURCE = "https://cloud.google.com/tpu/pricing (US list prices, 2025; not re-checked 2026-11-21)"
SPOT_FRACTION_ASSUMED = 0.40


@dataclass(frozen=True)
class ChipHourPrice:
    on_demand_usd: float | None
    spot_usd: float | None
    spot_is_assumption: bool = True


def _row(on_demand: float | None) -> ChipHourPrice:
    spot = round(on_demand * SPOT_FRACTION_ASSUMED, 4) if on_demand is not None else None
    return ChipHourPrice(on_demand_usd=on_demand, spot_usd=spot)


# Keyed by the catalog's generation names.
PRICES: dict[str, ChipHourPrice] = {
    "v4": _row(3.22),
    "v5e": _row(1.20),
    "v5p": _row(4.20),
    "v6e": _row(2.70),
    "tpu7x": _row(None),   # no public figure in the sources above
}


@dataclass(frozen=True)
class HourlyEstimate:
    generation: str
    chips: int
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    source: str = SOURCE
    spot_assumption: str = (f"spot = {SPOT_FRACTION_ASSUMED:.0%} of on-demand (assumed; Spot prices are "
                            "dynamic)")


def hourly_estimate(generation: str, chips: int) -> HourlyEstimate:
    """What `chips` TPU chips of a generation cost per hour while their VMs exist."""
    price = PRICES.get(generation, ChipHourPrice(None, None))

    def times(per_chip: float | None) -> float | None:
        return round(per_chip * chips, 2) if per_chip is not None else None

    return HourlyEstimate(generation=generation, chips=chips, on_demand_usd_per_hour=times(price.on_demand_usd),
                          spot_usd_per_hour=times(price.spot_usd))


# Disks priced per GiB-month of provisioned size, as Compute Engine bills them, from Disk and image pricing,
# https://cloud.google.com/compute/disks-image-pricing, us-central1 list prices as published in 2025, not re-checked
# offline (the same conventions as the chip prices above): Balanced Persistent Disk 0.10 USD. The Hyperdisk
# Balanced capacity figure is an ASSUMPTION (0.08 USD; the offline sources name no figure); its baseline 3,000 IOPS
# and 140 MiB/s are included at no charge (Compute Engine "About Hyperdisk Balanced"), and workloads/fuse_cache.py
# provisions exactly that, so only capacity bills. Billed per second while the disk exists.
DISK_PRICE_SOURCE = "https://cloud.google.com/compute/disks-image-pricing (us-central1 list prices, 2025)"
DISK_USD_PER_GIB_MONTH: dict[str, float] = {"pd-balanced": 0.10, "hyperdisk-balanced": 0.08}
DISK_PRICE_ASSUMED = frozenset({"hyperdisk-balanced"})
HOURS_PER_MONTH = 730   # Google Cloud's pricing pages convert monthly prices at 730 hours


def disk_usd_per_hour(kind: str, gib: int, disks: int) -> float | None:
    """What `disks` disks of `gib` GiB of a type cost per hour while they exist; None for an unpriced type."""
    price = DISK_USD_PER_GIB_MONTH.get(kind)
    return None if price is None else round(price * gib * disks / HOURS_PER_MONTH, 2)


# The workers' image (workerEnvironment=image): list prices as published in 2025, read from the pricing pages'
# offline copies and not re-checked live (the same conventions as the figures above).
# Artifact Registry storage: 0.10 USD per GB-month above 0.5 GB free per billing account, the same for regional
# and multi-regional repositories; pulls inside the repository's region are free
# (https://cloud.google.com/artifact-registry/pricing).
ARTIFACT_REGISTRY_USD_PER_GB_MONTH = 0.10
ARTIFACT_REGISTRY_FREE_GB = 0.5
ARTIFACT_REGISTRY_SOURCE = "https://cloud.google.com/artifact-registry/pricing (2025 list price)"
# Cloud Build's default pool, E2_HIGHCPU_8 (worker_env/cloudbuild.yaml machineType): 0.016 USD per build-minute,
# partial minutes by the second, queued time free; the 2,500 free minutes are for e2-standard-2 only
# (https://cloud.google.com/build/pricing).
CLOUD_BUILD_E2_HIGHCPU_8_USD_PER_MINUTE = 0.016
CLOUD_BUILD_SOURCE = "https://cloud.google.com/build/pricing (2025 list price)"
# The build's push from imageBuildRegion to a repository in another region crosses regions: ASSUMED 0.02 USD per GB,
# the upper end of Google Cloud's inter-region transfer within one continent (VPC network pricing, "Data transfer
# between regions"); not checked offline for Artifact Registry uploads, so the plan says "assumed".
INTER_REGION_USD_PER_GB = 0.02
