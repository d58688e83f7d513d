"""Where Cloud Build runs the workers' image build (imageBuildRegion).

Cloud Build "Locations" (https://cloud.google.com/build/docs/locations, "Restricted regions for some projects"):
"Depending on usage, certain projects might be restricted to only use Cloud Build in the following regions:
us-central1, us-west2, europe-west1, asia-east1, australia-southeast1, southamerica-east1". Elsewhere `gcloud
builds submit` fails with FAILED_PRECONDITION, and a new project is the likeliest to be restricted. So by default
the build runs in the one of those six regions nearest the cluster's region (the cluster's own when it is one of
them); the image repository stays in the cluster's region, so nodes pull from next door and only the build's
push (once per lock change) crosses regions.
"""
from __future__ import annotations

AUTO = "auto"
ALWAYS_ALLOWED = ("us-central1", "us-west2", "europe-west1", "asia-east1", "australia-southeast1",
                  "southamerica-east1")
LOCATIONS_PAGE = "https://cloud.google.com/build/docs/locations"
# Nearest always-allowed region by the region name's prefix (continent and coast): Google's region names start with
# their geography (Compute Engine "Regions and zones"). The longest matching prefix decides.
_NEAREST_BY_PREFIX = (
    ("us-west", "us-west2"), ("us-", "us-central1"), ("northamerica-", "us-central1"),
    ("southamerica-", "southamerica-east1"),
    ("europe-", "europe-west1"), ("me-", "europe-west1"), ("africa-", "europe-west1"),
    ("asia-", "asia-east1"), ("australia-", "australia-southeast1"),
)


def nearest_allowed(region: str) -> str:
    """The always-allowed build region nearest `region` (itself when it is one)."""
    if region in ALWAYS_ALLOWED:
        return region
    matches = [(len(prefix), allowed) for prefix, allowed in _NEAREST_BY_PREFIX if region.startswith(prefix)]
    return max(matches)[1] if matches else "us-central1"


def build_region(value: str | None, region: str) -> str:
    """imageBuildRegion resolved: `auto` is the nearest always-allowed region; an explicit region is used as given
    (its form is checked with the key; whether Cloud Build runs there for this project only the build can tell,
    and its script then names this key)."""
    return nearest_allowed(region) if value in (None, AUTO) else value
