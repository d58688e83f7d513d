"""The Compute Engine TPU quotas a stack's slices count against, by the names Cloud Quotas lists them under.

GKE's TPU node pools spend Compute Engine quota, per region, in chips, separately for on-demand and for
preemptible (Spot) capacity (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus#ensure-quota). The
Compute API's per-region quota metrics (`gcloud compute regions describe`; its Quota.metric enum, discovery
revision 20261106) know only v4 and v5e (TPU_PODSLICE_V4, TPU_LITE_PODSLICE_V5, TPU_LITE_DEVICE_V5 and their
PREEMPTIBLE_ forms), so for v6e, v5p and TPU7x that command shows nothing: those quotas are seen through Cloud
Quotas (`gcloud beta quotas info list --service=compute.googleapis.com`,
https://cloud.google.com/sdk/gcloud/reference/beta/quotas/info/list).

What is published and what is not (read 2026-11): every Cloud Quotas id below is an assumption.
- Google's v6e guide names the on-demand quota TPUS_PER_TPU_FAMILY, "the maximum number of chips you can access"
  (https://cloud.google.com/tpu/docs/v6e-intro, prerequisites). Its Cloud Quotas id
  TPUS-PER-TPU-FAMILY-per-project-region with the dimension tpu_family=CT6E, and the Spot quota
  PREEMPTIBLE-TPU-V6E-per-project-region, are as a public tool reports them from a project
  (xbill9/tpu-skill-claude, GCE_QUOTA_ID / GCE_SPOT_QUOTA_ID / GCE_TPU_FAMILY), not from Google's pages: assumed.
- v4 and v5e: the Compute API metric names above (verified); their Cloud Quotas ids are assumed to be the same
  names in Cloud Quotas' spelling.
- v5p and TPU7x: no quota id was found in a source read here. The filter below still lists them (every TPU quota
  id of the service holds "TPU"); the names given are assumptions.
Flex-start VMs spend preemptible quota first and standard quota when it lacks (Compute Engine "Provisioning
models", https://cloud.google.com/compute/docs/instances/provisioning-models).
"""
from __future__ import annotations

from dataclasses import dataclass

SERVICE = "compute.googleapis.com"


@dataclass(frozen=True)
class Quota:
    """One quota. Its Cloud Quotas id is an assumption for every generation (see above); `published` is the name a
    Google source read here gives it (a Compute API metric, or the v6e guide's TPUS_PER_TPU_FAMILY), "" when none."""
    quota_id: str                 # as `gcloud beta quotas info list` is assumed to show it (quotaId)
    dimension: str = ""           # the dimension that selects this generation, e.g. tpu_family=CT6E
    published: str = ""

    def describe(self) -> str:
        where = f" with {self.dimension}" if self.dimension else ""
        return f"{self.quota_id}{where}"


@dataclass(frozen=True)
class TpuQuotas:
    on_demand: Quota
    preemptible: Quota
    filter_words: tuple[str, ...]   # quota id fragments that find this generation's quotas in the listing


QUOTAS: dict[str, TpuQuotas] = {
    "v4": TpuQuotas(
        Quota("TPU-PODSLICE-V4-per-project-region", published="TPU_PODSLICE_V4"),
        Quota("PREEMPTIBLE-TPU-PODSLICE-V4-per-project-region", published="PREEMPTIBLE_TPU_PODSLICE_V4"),
        ("V4",)),
    "v5e": TpuQuotas(
        Quota("TPU-LITE-PODSLICE-V5-per-project-region", published="TPU_LITE_PODSLICE_V5"),
        Quota("PREEMPTIBLE-TPU-LITE-PODSLICE-V5-per-project-region", published="PREEMPTIBLE_TPU_LITE_PODSLICE_V5"),
        ("LITE",)),
    "v5p": TpuQuotas(
        Quota("TPU-V5P-per-project-region"),
        Quota("PREEMPTIBLE-TPU-V5P-per-project-region"),
        ("V5P",)),
    "v6e": TpuQuotas(
        Quota("TPUS-PER-TPU-FAMILY-per-project-region", dimension="tpu_family=CT6E", published="TPUS_PER_TPU_FAMILY"),
        Quota("PREEMPTIBLE-TPU-V6E-per-project-region"),
        ("V6E", "TPUS-PER-TPU-FAMILY")),
    "tpu7x": TpuQuotas(
        Quota("TPUS-PER-TPU-FAMILY-per-project-region", dimension="tpu_family=TPU7X"),
        Quota("PREEMPTIBLE-TPU-7X-per-project-region"),
        ("7X", "TPUS-PER-TPU-FAMILY")),
}


@dataclass(frozen=True)
class QuotaNeed:
    """What one stack needs: which quota, how many chips, in which region."""
    generation: str
    region: str
    chips: int
    capacity: str                  # on-demand, spot, flex-start, reservation
    quotas: tuple[Quota, ...]      # the quotas the capacity spends, in the order it spends them
    note: str = ""

    @property
    def kind(self) -> str:
        return {"on-demand": "on-demand", "spot": "preemptible (Spot)",
                "flex-start": "preemptible, else on-demand (flex-start)",
                "reservation": "the reservation's"}[self.capacity]

    def list_command(self, project: str) -> str:
        """The Cloud Quotas listing of this generation's TPU quotas (ids and their per-region values)."""
        words = " OR ".join(f"quotaId~{word}" for word in QUOTAS[self.generation].filter_words)
        return (f"gcloud beta quotas info list --service={SERVICE} --project={project} "
                f"--filter='{words}' --format='yaml(quotaId,dimensionsInfos)'")

    def request(self) -> str:
        """What to ask for in the console's Quotas page (https://cloud.google.com/docs/quotas/view-manage)."""
        if self.capacity == "reservation":
            # Assumed: Compute Engine counts a reservation's resources against quota when it is created.
            return f"none beyond the reservation (assumed: its {self.chips} chips were counted when it was made)"
        names = " or ".join(quota.describe() for quota in self.quotas)
        return f"{self.chips} chips of {names} in {self.region}"


def quota_need(generation: str, region: str, chips: int, capacity: str) -> QuotaNeed:
    quotas = QUOTAS[generation]
    spent = {"on-demand": (quotas.on_demand,), "spot": (quotas.preemptible,),
             "flex-start": (quotas.preemptible, quotas.on_demand), "reservation": ()}[capacity]
    return QuotaNeed(generation, region, chips, capacity, spent)
