"""Whether the RayJob's cluster still exists, as KubeRay's own objects say, read through the Kubernetes API.

The submitter (trainer/submitter.py) must never take a network error for a deleted cluster. KubeRay v1.7.0's head
Service is headless with `publishNotReadyAddresses: true` (ray-operator/controllers/ray/common/service.go
BuildHeadServiceForRayJob / BuildHeadService): its name resolves to the head pod as soon as the pod has an IP,
ready or not, so "connection refused" on the job API means a head pod with nothing listening yet (a restarting
dashboard, a head pod being replaced), and a name that does not resolve can be a DNS blip. Exiting then ends the
RayJob 30 s later (rayjob_controller.go `checkSubmitterFinishedTimeoutAndUpdateStatusIfNeeded`,
DefaultSubmitterFinishedTimeout, reason JobDeploymentStatusTransitionGracePeriodExceeded) and deletes a cluster
that was about to answer again.

KubeRay deletes the job's RayCluster only from these RayJob states (rayjob_controller.go `Reconcile`):
Complete and Failed (with shutdownAfterJobFinishes, `handleShutdownAfterJobFinishes` → `deleteClusterResources`),
Suspending and Retrying (`deleteClusterResources`, then Suspended or New). So the cluster is gone when
- the RayJob no longer exists (deleted: its cluster and this pod's Job are owned by it and go with it), or
- its `status.jobDeploymentStatus` is one of those states, or
- the RayCluster it names in `status.rayClusterName` does not exist or is being deleted (`deletionTimestamp`).
Anything else, and any read that fails (the API unreachable, a refusal), is "in doubt": the submitter keeps
polling within its outage limit, which is longer than KubeRay's own tolerance of failing status checks.

The pod reads with its service account token; the Role the stack binds to it grants `get` on this RayJob (by
name) and on RayClusters (workloads/ray/manifests.py submitter_role). The RayJob's name reaches the pod through
the downward API from the label KubeRay puts on the submitter's pod template (`ray.io/originated-from-cr-name`,
rayjob_controller.go `getSubmitterTemplate`).
"""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping

from core.ray_cluster import RAYCLUSTER_API, raycluster_path
from trainer.grow import API_URL_ENV, SERVICE_ACCOUNT_DIR, TOKEN_FILE_ENV

# Set on the submitter container by the stack (workloads/ray/manifests.py, downward API).
RAYJOB_NAME_ENV = "RAYJOB_NAME"
RAYJOB_NAMESPACE_ENV = "RAYJOB_NAMESPACE"
# The label KubeRay sets on the submitter pod template to the RayJob's name (utils/constant.go
# RayOriginatedFromCRNameLabelKey).
RAYJOB_NAME_LABEL = "ray.io/originated-from-cr-name"
# RayJob states in which KubeRay deletes, or has deleted, the job's RayCluster (module docstring).
CLUSTER_DELETING_STATES = frozenset({"Complete", "Failed", "Suspending", "Suspended", "Retrying"})
TIMEOUT_S = 10.0

GONE, PRESENT, IN_DOUBT = "gone", "present", "in doubt"


def rayjob_path(namespace: str, name: str) -> str:
    group, version = RAYCLUSTER_API.split("/")
    return f"/apis/{group}/{version}/namespaces/{namespace}/rayjobs/{name}"


@dataclass(frozen=True)
class Verdict:
    state: str          # GONE, PRESENT or IN_DOUBT
    reason: str         # a few words for the submitter's line (a GONE reason fits it in 100 columns)


class ReadFailed(Exception):
    """A read that says nothing about the objects (unreachable API, a refusal, a bad answer)."""


@dataclass(frozen=True)
class KubeReader:
    """GET of one object's JSON by API path; None when the API answers 404."""
    base_url: str
    token_file: str
    ca_file: str | None

    def get(self, path: str) -> dict | None:
        try:
            with open(self.token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
            request = urllib.request.Request(self.base_url + path, method="GET", headers={
                "Authorization": f"Bearer {token}", "Accept": "application/json"})
            context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise ReadFailed(f"HTTP {err.code} {err.reason}") from err
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise ReadFailed(f"{type(err).__name__}: {getattr(err, 'reason', err)}") from err


@dataclass(frozen=True)
class ClusterWatch:
    """Asks the Kubernetes API whether the RayJob's cluster is gone (module docstring)."""
    get: Callable[[str], dict | None]
    namespace: str
    rayjob: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ClusterWatch | str":
        """The watch for this pod's RayJob, or why there is none (then every question is in doubt)."""
        name, namespace = env.get(RAYJOB_NAME_ENV), env.get(RAYJOB_NAMESPACE_ENV)
        if not name or not namespace:
            return f"{RAYJOB_NAME_ENV}/{RAYJOB_NAMESPACE_ENV} unset"
        if env.get(API_URL_ENV):
            token_file = env.get(TOKEN_FILE_ENV, f"{SERVICE_ACCOUNT_DIR}/token")
            reader = KubeReader(env[API_URL_ENV].rstrip("/"), token_file, None)
        else:
            host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                return "no Kubernetes API in this pod (KUBERNETES_SERVICE_HOST unset)"
            host = f"[{host}]" if ":" in host else host
            reader = KubeReader(f"https://{host}:{port}", f"{SERVICE_ACCOUNT_DIR}/token",
                                f"{SERVICE_ACCOUNT_DIR}/ca.crt")
        return cls(reader.get, namespace, name)

    def verdict(self) -> Verdict:
        try:
            job = self.get(rayjob_path(self.namespace, self.rayjob))
            if job is None:
                return Verdict(GONE, f"RayJob {self.rayjob} deleted")
            status = job.get("status") or {}
            state = status.get("jobDeploymentStatus", "")
            if state in CLUSTER_DELETING_STATES:
                reason = status.get("reason")
                return Verdict(GONE, f"RayJob {state}" + (f" ({reason})" if reason else ""))
            cluster_name = status.get("rayClusterName")
            if not cluster_name:
                return Verdict(IN_DOUBT, f"RayJob {state or 'New'} names no RayCluster")
            cluster = self.get(raycluster_path(self.namespace, cluster_name))
        except ReadFailed as err:
            return Verdict(IN_DOUBT, f"Kubernetes API: {err}")
        if cluster is None:
            return Verdict(GONE, "its RayCluster was deleted")
        if (cluster.get("metadata") or {}).get("deletionTimestamp"):
            return Verdict(GONE, "its RayCluster is being deleted")
        return Verdict(PRESENT, f"RayJob {state}, RayCluster {cluster_name} present")


@dataclass(frozen=True)
class NoWatch:
    """Without the RayJob's name or an API: every question is in doubt (the submitter keeps polling)."""
    why: str

    def verdict(self) -> Verdict:
        return Verdict(IN_DOUBT, self.why)


def cluster_watch(env: Mapping[str, str]) -> "ClusterWatch | NoWatch":
    watch = ClusterWatch.from_env(env)
    return NoWatch(watch) if isinstance(watch, str) else watch
