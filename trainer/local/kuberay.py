"""A stand-in for the two parts of GKE an elastic run grows through, on loopback: the Kubernetes API server that
takes the driver's PATCH of its RayCluster, and KubeRay's count of the slices that RayCluster wants.

What it plays, and from where:
- the API server: a bearer token (the pod's service account; the stack's Role allows `patch` on RayClusters),
  a JSON patch (RFC 6902: `test` then `replace`; a failed test refuses the whole patch, 422) on
  /apis/ray.io/v1/namespaces/NS/rayclusters/NAME, content type application/json-patch+json;
- KubeRay v1.7.0: a worker group wants min(max(replicas, minReplicas), maxReplicas) replicas
  (ray-operator/controllers/ray/utils/util.go `GetWorkerGroupDesiredReplicas`), and the RayCluster controller
  creates pods for the replicas it lacks; on GKE those pods wait for their slice's nodes. Here the local run
  decides when "capacity arrives" (--add-slice-at) and then starts the fake hosts of the slices KubeRay wants.

trainer.local starts it for elastic runs and hands the driver the environment KubeRay and the pod would give it
(RAY_CLUSTER_NAME, RAY_CLUSTER_NAMESPACE, the API's URL and a token file), so the driver runs trainer/grow.py
exactly as on the cluster.
"""
from __future__ import annotations

import copy
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from core.ray_cluster import JSON_PATCH, TPU_WORKER_GROUP, raycluster_path
from trainer.grow import API_URL_ENV, TOKEN_FILE_ENV

NAMESPACE = "local"
CLUSTER = "local-raycluster"


class PatchError(Exception):
    """A JSON patch the API server refuses (HTTP 422)."""


def _pointer(doc: object, path: str) -> tuple[object, str | int]:
    """(parent, key) of an RFC 6901 pointer in `doc`; the target itself must exist (test and replace need it)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last: str | int = int(parts[-1]) if isinstance(node, list) else parts[-1]
    node[last]          # KeyError/IndexError if absent
    return node, last


def apply_json_patch(doc: dict, patch: list[dict]) -> dict:
    """RFC 6902 `test` and `replace` (all the driver sends), all-or-nothing; other operations are refused here."""
    result = copy.deepcopy(doc)
    for op in patch:
        try:
            parent, key = _pointer(result, op["path"])
        except (KeyError, IndexError, ValueError, TypeError) as err:
            raise PatchError(f"path {op.get('path')!r} does not exist") from err
        if op["op"] == "test":
            if parent[key] != op["value"]:
                raise PatchError(f"test failed at {op['path']}: {parent[key]!r} != {op['value']!r}")
        elif op["op"] == "replace":
            parent[key] = op["value"]
        else:
            raise PatchError(f"operation {op['op']!r} is not supported by this stand-in")
    return result


def desired_replicas(group: dict) -> int:
    """KubeRay v1.7.0 utils.GetWorkerGroupDesiredReplicas, in replicas (not pods)."""
    replicas, low, high = group.get("replicas"), group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
    if replicas is None or replicas < low:
        return low
    return min(replicas, high)


class KubeRayStandIn:
    """The job's RayCluster (its TPU group) behind a loopback API that takes the driver's PATCH."""

    def __init__(self, workdir: Path, min_slices: int, max_slices: int, replicas: int):
        self.cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
                        "spec": {"workerGroupSpecs": [{"groupName": TPU_WORKER_GROUP, "replicas": replicas,
                                                       "minReplicas": min_slices, "maxReplicas": max_slices}]}}
        self.token = secrets.token_hex(16)
        self.token_file = workdir / "serviceaccount-token"
        self.token_file.write_text(self.token, encoding="utf-8")
        self.patches: list[list[dict]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def desired_slices(self) -> int:
        with self._lock:
            return desired_replicas(self.cluster["spec"]["workerGroupSpecs"][0])

    def _handle_patch(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict]:
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"reason": "Unauthorized"}
        if handler.path != raycluster_path(NAMESPACE, CLUSTER):
            return 404, {"reason": "NotFound", "message": handler.path}
        if handler.headers.get("Content-Type") != JSON_PATCH:
            return 415, {"reason": "UnsupportedMediaType"}
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        try:
            patch = json.loads(body)
            with self._lock:
                self.cluster = apply_json_patch(self.cluster, patch)
                self.patches.append(patch)
                return 200, copy.deepcopy(self.cluster)
        except (ValueError, PatchError) as err:
            return 422, {"reason": "Invalid", "message": str(err)}

    def start(self) -> str:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self):   # noqa: N802 (http.server's naming)
                status, body = stand_in._handle_patch(self)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):   # the run's own output says what happened
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="kuberay-stand-in", daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def driver_env(self) -> dict[str, str]:
        """What the head pod's driver sees on GKE: KubeRay's two variables, and where the API and token are."""
        return {"RAY_CLUSTER_NAME": CLUSTER, "RAY_CLUSTER_NAMESPACE": NAMESPACE, API_URL_ENV: self.url,
                TOKEN_FILE_ENV: str(self.token_file)}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
