"""An elastic run asks KubeRay for all its slices once it has started on the fewest (core/ray_cluster.py says why).

The driver runs on the head of the RayCluster its RayJob created. KubeRay gives every Ray container the cluster's
name and namespace (RAY_CLUSTER_NAME, RAY_CLUSTER_NAMESPACE: kuberay v1.7.0 common/pod.go), and the pod's service
account token reaches the API server at KUBERNETES_SERVICE_HOST. The stack binds that service account to a Role
that allows `patch` on RayClusters in the namespace and nothing else (workloads/ray/manifests.py grow_role).

One PATCH, retried a few times for what a retry can fix (the API server unreachable, 429, 5xx); a refusal (401,
403, 404, 422) is reported and not retried. Either way the run goes on with the slices it has: growing is worth
having, never worth failing a running job for.

Off KubeRay (a `ray job submit` to any other cluster) there is nothing to patch. trainer.local points
TRAINER_KUBE_API_URL at its stand-in for KubeRay (trainer/local/kuberay.py) so that the local run grows through
this same code.
"""
from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping

from core.ray_cluster import JSON_PATCH, grow_patch, raycluster_path

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Set by trainer.local only: the API's base URL (plain http on loopback) and the token file.
API_URL_ENV = "TRAINER_KUBE_API_URL"
TOKEN_FILE_ENV = "TRAINER_KUBE_TOKEN_FILE"
ATTEMPTS = 5
FIRST_BACKOFF_S = 2.0
TIMEOUT_S = 10.0
# Statuses a later attempt may get past: throttling and the API server's own trouble.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class KubeApi:
    """Where the job's RayCluster is and how to reach the API server from this pod."""
    base_url: str
    token_file: str
    ca_file: str | None
    namespace: str
    cluster: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "KubeApi | str":
        """The API of this pod's cluster, or why there is none."""
        cluster, namespace = env.get("RAY_CLUSTER_NAME"), env.get("RAY_CLUSTER_NAMESPACE")
        if not cluster or not namespace:
            return "not on a KubeRay cluster (RAY_CLUSTER_NAME/RAY_CLUSTER_NAMESPACE unset)"
        if env.get(API_URL_ENV):
            return cls(env[API_URL_ENV].rstrip("/"), env.get(TOKEN_FILE_ENV, f"{SERVICE_ACCOUNT_DIR}/token"), None,
                       namespace, cluster)
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            return "no Kubernetes API in this pod (KUBERNETES_SERVICE_HOST unset)"
        host = f"[{host}]" if ":" in host else host     # an IPv6 service address
        return cls(f"https://{host}:{port}", f"{SERVICE_ACCOUNT_DIR}/token", f"{SERVICE_ACCOUNT_DIR}/ca.crt",
                   namespace, cluster)


def patch_request(api: KubeApi, slices: int) -> urllib.request.Request:
    with open(api.token_file, encoding="utf-8") as handle:
        token = handle.read().strip()
    return urllib.request.Request(
        api.base_url + raycluster_path(api.namespace, api.cluster), data=json.dumps(grow_patch(slices)).encode(),
        method="PATCH", headers={"Content-Type": JSON_PATCH, "Authorization": f"Bearer {token}",
                                 "Accept": "application/json"})


def _send(api: KubeApi, request: urllib.request.Request) -> None:
    context = ssl.create_default_context(cafile=api.ca_file) if api.ca_file else None
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
        response.read()


def request_slices(slices: int, env: Mapping[str, str] | None = None,
                   send: Callable[[KubeApi, urllib.request.Request], None] = _send,
                   sleep: Callable[[float], None] = time.sleep) -> str:
    """Ask KubeRay for `slices` replicas of the TPU group; one line saying what happened."""
    api = KubeApi.from_env(os.environ if env is None else env)
    if isinstance(api, str):
        return f"{api}: the run uses the slices that join"
    where = f"RayCluster {api.namespace}/{api.cluster}"
    backoff, reason = FIRST_BACKOFF_S, ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _ = send(api, patch_request(api, slices))
            return f"asked KubeRay for {slices} slices ({where}); the missing ones join when capacity allows"
        except urllib.error.HTTPError as err:
            reason = f"HTTP {err.code} {err.reason}"
            if err.code not in RETRYABLE_STATUS:
                break
        except (urllib.error.URLError, OSError) as err:     # unreachable, timed out, no token file
            reason = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            if isinstance(err, FileNotFoundError):
                break
        if attempt < ATTEMPTS:
            sleep(backoff)
            backoff *= 2
    return (f"could not ask KubeRay for {slices} slices ({where}: {reason}); training goes on with the slices "
            "that are up")
