"""trainer/grow.py: the driver of an elastic run asks KubeRay for all its slices with one PATCH of its RayCluster.

Where it finds the cluster: KubeRay v1.7.0 common/pod.go sets RAY_CLUSTER_NAME (fieldRef metadata.labels
['ray.io/cluster']) and RAY_CLUSTER_NAMESPACE on every Ray container; the API server and the service account token
are the standard in-cluster ones (Kubernetes docs, "Accessing the Kubernetes API from a Pod":
KUBERNETES_SERVICE_HOST/PORT, /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}).
The same request goes over real HTTP to trainer.local's stand-in (trainer/local/kuberay.py), which is what the
local run grows through.
"""
from __future__ import annotations

import io
import json
import urllib.error

import pytest

from core.ray_cluster import JSON_PATCH, grow_patch
from trainer import grow
from trainer.local.kuberay import KubeRayStandIn

ON_GKE = {"RAY_CLUSTER_NAME": "maxtext-train-1a2b3c4d-xk2p9", "RAY_CLUSTER_NAMESPACE": "tpu-training",
          "KUBERNETES_SERVICE_HOST": "10.8.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_on_gke_the_api_is_the_in_cluster_one():
    api = grow.KubeApi.from_env(ON_GKE)
    assert api == grow.KubeApi("https://10.8.0.1:443", "/var/run/secrets/kubernetes.io/serviceaccount/token",
                               "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "tpu-training",
                               "maxtext-train-1a2b3c4d-xk2p9")


@pytest.mark.parametrize("missing", ["RAY_CLUSTER_NAME", "RAY_CLUSTER_NAMESPACE", "KUBERNETES_SERVICE_HOST"])
def test_off_kuberay_nothing_is_sent(missing):
    sent = []
    env = {k: v for k, v in ON_GKE.items() if k != missing}
    message = grow.request_slices(2, env=env, send=lambda api, req: sent.append(req))
    assert not sent and message.endswith("the run uses the slices that join") and missing in message


def _token(tmp_path) -> dict:
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    return {**ON_GKE, grow.TOKEN_FILE_ENV: str(token), grow.API_URL_ENV: "http://127.0.0.1:1"}


def test_the_request_is_one_json_patch_of_the_clusters_replicas(tmp_path):
    sent = []
    message = grow.request_slices(2, env=_token(tmp_path), send=lambda api, req: sent.append(req))
    [request] = sent
    assert request.get_method() == "PATCH"
    assert request.full_url == ("http://127.0.0.1:1/apis/ray.io/v1/namespaces/tpu-training/rayclusters/"
                                "maxtext-train-1a2b3c4d-xk2p9")
    assert request.get_header("Content-type") == JSON_PATCH
    assert request.get_header("Authorization") == "Bearer secret-token"
    assert json.loads(request.data) == grow_patch(2)
    assert message.startswith("asked KubeRay for 2 slices (RayCluster tpu-training/maxtext-train-1a2b3c4d-xk2p9)")


def _http_error(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://x", code, "reason", {}, io.BytesIO(b""))


def test_throttling_and_server_errors_are_retried_then_it_succeeds(tmp_path):
    outcomes = [_http_error(503), _http_error(429), urllib.error.URLError("connection refused"), None]
    sleeps = []

    def send(api, request):
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    message = grow.request_slices(2, env=_token(tmp_path), send=send, sleep=sleeps.append)
    assert message.startswith("asked KubeRay for 2 slices") and not outcomes
    assert sleeps == [2.0, 4.0, 8.0]


@pytest.mark.parametrize("code", [401, 403, 404, 422])
def test_a_refusal_is_reported_once_and_training_goes_on(tmp_path, code):
    calls = []

    def send(api, request):
        calls.append(request)
        raise _http_error(code)

    message = grow.request_slices(2, env=_token(tmp_path), send=send, sleep=lambda s: None)
    assert len(calls) == 1
    assert f"HTTP {code}" in message and "training goes on with the slices that are up" in message


def test_a_lasting_outage_gives_up_after_a_bounded_number_of_attempts(tmp_path):
    calls, sleeps = [], []

    def send(api, request):
        calls.append(request)
        raise _http_error(503)

    message = grow.request_slices(2, env=_token(tmp_path), send=send, sleep=sleeps.append)
    assert len(calls) == grow.ATTEMPTS and len(sleeps) == grow.ATTEMPTS - 1
    assert "could not ask KubeRay for 2 slices" in message and "HTTP 503" in message


def test_over_http_the_stand_in_takes_the_patch_and_kuberay_wants_every_slice(tmp_path):
    stand_in = KubeRayStandIn(tmp_path, min_slices=1, max_slices=2, replicas=1)
    stand_in.start()
    try:
        assert stand_in.desired_slices == 1
        message = grow.request_slices(2, env={**stand_in.driver_env()})
        assert message.startswith("asked KubeRay for 2 slices"), message
        assert stand_in.desired_slices == 2 and stand_in.patches == [grow_patch(2)]
        # KubeRay clamps replicas to maxReplicas (utils.GetWorkerGroupDesiredReplicas).
        grow.request_slices(5, env=stand_in.driver_env())
        assert stand_in.desired_slices == 2
    finally:
        stand_in.stop()


def test_the_stand_in_refuses_a_wrong_token_like_the_api_server(tmp_path):
    stand_in = KubeRayStandIn(tmp_path, min_slices=1, max_slices=2, replicas=1)
    stand_in.start()
    try:
        wrong = tmp_path / "wrong"
        wrong.write_text("not-the-token")
        message = grow.request_slices(2, env={**stand_in.driver_env(), grow.TOKEN_FILE_ENV: str(wrong)},
                                      sleep=lambda s: None)
        assert "HTTP 401" in message and stand_in.desired_slices == 1 and not stand_in.patches
    finally:
        stand_in.stop()
