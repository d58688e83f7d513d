"""Facts about GCP locations the config is checked against: regions, the zones that offer each TPU generation,
and Cloud Storage bucket locations. Pure data; rules.py and key_checks.py use it.

These tables age. A zone newer than the table is accepted with `tpuZoneCheck: false` (schema.py), which skips
the zone and region checks below and nothing else.

Sources (read 2026-11-22):
- Cloud TPU "TPU regions and zones", https://cloud.google.com/tpu/docs/regions-zones (now served from
  docs.cloud.google.com/tpu/docs/regions-zones and .../types-zones). Its North America rows and the first Europe row
  were read in full from the current revision. That revision also lists AI zones ("specialized Google Cloud zones
  for AI/ML ... within a 5ms radius from standard Google Cloud zones"), e.g. us-central1-ai1a. The stored copy
  available here stopped after the Europe v6e row, so the remaining Europe and Asia Pacific rows
  (v5p/v5e europe-west4-b, v6e asia-northeast1-b, v5e asia-southeast1-b) are those of the page's 2025 revisions and
  were not re-read today; a public `gcloud compute tpus accelerator-types list` of 2026-10-03 also shows v5e
  (v5litepod) in europe-west4-b and asia-southeast1-b, and v6e in asia-southeast1-b. The page's earlier
  revision (mirrored at cloud-dot-devsite-v2-prod.appspot.com/tpu/docs/types-zones) also listed single-tenant
  zones, kept below.
- Compute Engine regions, https://cloud.google.com/compute/docs/regions-zones (region names as listed on
  Google Cloud location pages read 2026-11-22, e.g. cloud.google.com/workload-manager/docs/evaluate/locations),
  plus us-central2, the region of the TPU v4 zone us-central2-b (not open to general Compute Engine use).
- Cloud Storage bucket locations, https://cloud.google.com/storage/docs/locations: regions, the predefined
  dual-regions ASIA1, EUR4, EUR5, EUR7, EUR8, NAM4 and the multi-regions ASIA, EU, US. A zone is a location only
  for Rapid buckets (zonal buckets), which this stack does not create.
"""
from __future__ import annotations

# Regions where Compute Engine (and so GKE and Cloud TPU) runs.
GCP_REGIONS: frozenset[str] = frozenset({
    # Americas
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "southamerica-east1", "southamerica-west1",
    "us-central1", "us-east1", "us-east4", "us-east5", "us-south1",
    "us-west1", "us-west2", "us-west3", "us-west4",
    # Europe
    "europe-central2", "europe-north1", "europe-north2", "europe-southwest1",
    "europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6",
    "europe-west8", "europe-west9", "europe-west10", "europe-west12",
    # Middle East and Africa
    "me-central1", "me-central2", "me-west1", "africa-south1",
    # Asia Pacific
    "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3",
    "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2", "asia-southeast3",
    "australia-southeast1", "australia-southeast2",
})
# The TPU v4 region (zone us-central2-b): a TPU-only region, not among the Compute Engine regions above.
TPU_ONLY_REGIONS: frozenset[str] = frozenset({"us-central2"})

# TPU generation (core/tpu_catalog.py names) → zones the "TPU regions and zones" page lists for it.
_LISTED: dict[str, tuple[str, ...]] = {
    # North America: "us-central1-ai1a" (TPU7x row of the page's markdown) and "us-central1-c".
    "tpu7x": ("us-central1-ai1a", "us-central1-c"),
    # North America (current revision; it spells the AI zone "us-central1-ai1" in the v6e row, which is
    # us-central1-ai1a, the only AI zone of us-central1 the page names), Europe, Asia Pacific.
    "v6e": ("us-central1-ai1a", "us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "us-south1-ai1b",
            "europe-west4-a", "asia-northeast1-b"),
    "v5p": ("us-central1-a", "us-east5-a", "europe-west4-b"),
    "v5e": ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "europe-west4-b", "asia-southeast1-b"),
    "v4": ("us-central2-b",),
}
# Zones the page's earlier revision listed for a generation only as "(single tenant)" (us-west1-c for v6e "except
# Spot quota"): capacity dedicated to one customer's contract, not something a general project's node pool gets.
# The current page lists none of them as a general TPU zone, and GKE points to that page for where TPUs are
# available ("Plan TPUs in GKE", https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus, "Validate TPU
# availability"). So they are not offered: a user who holds such capacity sets tpuZoneCheck=false.
_SINGLE_TENANT: dict[str, tuple[str, ...]] = {
    "v6e": ("us-east5-c", "us-east4-a", "us-east4-b", "us-west1-c"),
    "v5p": ("us-east5-b", "us-east5-c", "us-south1-a"),
    "v5e": ("us-east5-a", "us-east5-b", "us-east5-c"),
}
TPU_ZONES: dict[str, tuple[str, ...]] = {generation: tuple(sorted(zones)) for generation, zones in _LISTED.items()}

# Cloud Storage locations besides regions (upper case, as the Storage API reports them).
GCS_MULTI_REGIONS: tuple[str, ...] = ("ASIA", "EU", "US")
GCS_DUAL_REGIONS: tuple[str, ...] = ("ASIA1", "EUR4", "EUR5", "EUR7", "EUR8", "NAM4")


def region_exists(region: str) -> bool:
    return region in GCP_REGIONS or region in TPU_ONLY_REGIONS


def zones_offering(generation: str) -> tuple[str, ...]:
    return TPU_ZONES.get(generation, ())


def single_tenant_only(generation: str, zone: str) -> bool:
    """Whether the page lists `zone` for `generation` only as single-tenant capacity."""
    return zone in _SINGLE_TENANT.get(generation, ()) and zone not in zones_offering(generation)


def is_gcs_location(location: str) -> bool:
    """A bucket location: a region (any case), a predefined dual-region or a multi-region."""
    return (location.lower() in GCP_REGIONS or location.upper() in GCS_DUAL_REGIONS
            or location.upper() in GCS_MULTI_REGIONS)
