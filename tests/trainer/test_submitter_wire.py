"""`python -m trainer.submitter` as the submitter pod runs it, against a stand-in for the head's job API over HTTP.

The stand-in speaks the routes Ray 2.60's JobSubmissionClient uses (ray/dashboard/modules/job/sdk.py,
dashboard_sdk.py): GET /api/version, GET+PUT /api/packages/{protocol}/{name} (the working_dir upload),
POST /api/jobs/, GET /api/jobs/{id} (404 for an unknown job, as job_head.py answers), and the WebSocket
/api/jobs/{id}/logs/tail, which starts at the top of the log on every connection. It refuses any request without
the cluster's token (`Authorization: Bearer <RAY_AUTH_TOKEN>`, what KubeRay's RAY_AUTH_MODE=token and
RAY_AUTH_TOKEN make Ray's client send). It drops the log stream mid-run (a WebSocket that closes with code 1006,
ray-project/ray#60665) and answers status requests 503 for a while, as a restarting dashboard or proxy does.
"""
from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.conftest import REPO

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

TOKEN = "s3cret-cluster-token"
JOB_ID = "maxtext-train-abc-xyz12"
LOG = [f"step {n}: loss {4 - n / 10:.2f}\n" for n in range(1, 9)]


@dataclass
class FakeJobApi:
    run_s: float                       # the job runs this long after it is submitted
    outage: tuple[float, float]        # status answers 503 in this window (seconds after submission)
    submitted_at: float | None = None
    submissions: int = 0
    uploads: dict[str, bytes] = field(default_factory=dict)
    unauthorised: list[str] = field(default_factory=list)
    tail_connections: int = 0
    submitted: threading.Event = field(default_factory=threading.Event)

    def elapsed(self) -> float:
        return time.monotonic() - self.submitted_at

    def status(self) -> str:
        return "RUNNING" if self.elapsed() < self.run_s else "SUCCEEDED"

    def log_so_far(self) -> list[str]:
        share = min(1.0, self.elapsed() / self.run_s)
        return LOG[:max(1, int(len(LOG) * share))]

    @web.middleware
    async def token_check(self, request, handler):
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.unauthorised.append(f"{request.method} {request.path}")
            return web.Response(status=401, text="Unauthorized: token required")
        return await handler(request)

    async def version(self, request):
        return web.json_response({"version": "4", "ray_version": "2.60.0", "ray_commit": "fake"})

    async def package_get(self, request):
        name = request.match_info["name"]
        return web.Response(status=200 if name in self.uploads else 404)

    async def package_put(self, request):
        self.uploads[request.match_info["name"]] = await request.read()
        return web.Response(status=200)

    async def submit(self, request):
        body = await request.json()
        if self.submitted_at is not None:
            return web.Response(status=400, text=f"Job with submission_id {body['submission_id']} already exists.")
        self.submissions += 1
        self.submitted_at = time.monotonic()
        self.entrypoint, self.runtime_env = body["entrypoint"], body["runtime_env"]
        self.submitted.set()
        return web.json_response({"job_id": body["submission_id"], "submission_id": body["submission_id"]})

    async def job(self, request):
        if self.submitted_at is None or request.match_info["id"] != JOB_ID:
            return web.Response(status=404, text=f"Job {request.match_info['id']} does not exist")
        if self.outage[0] <= self.elapsed() < self.outage[1]:
            return web.Response(status=503, text="Service Unavailable")
        return web.json_response({"type": "SUBMISSION", "job_id": JOB_ID, "submission_id": JOB_ID,
                                  "status": self.status(), "entrypoint": self.entrypoint, "message": ""})

    async def tail(self, request):
        self.tail_connections += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sent = 0
        while True:
            lines = self.log_so_far()
            for line in lines[sent:]:
                await ws.send_str(line)
            sent = len(lines)
            if self.tail_connections == 1 and sent >= 3:
                # A dropped stream: the connection goes without a closing handshake (code 1006 at the client).
                request.transport.abort()
                return ws
            if self.status() != "RUNNING" and sent == len(LOG):
                await ws.close()
                return ws
            await asyncio.sleep(0.05)


def _listener_and_guard() -> tuple[socket.socket, socket.socket]:
    """A listening socket for the fake head, and a second socket bound to the same port that never listens.

    Both set SO_REUSEPORT, which Linux allows for sockets of one user (socket(7)); connections go only to a
    listening socket, so once the fake stops its port refuses, as a head pod with nothing listening does. Without
    the guard the freed port is anyone's: a local Ray node starting beside the suite, or the submitter's own next
    connection, whose ephemeral source port can be that very port (a TCP simultaneous open to itself), both of
    which accept and never answer HTTP, so the submitter waits out its request timeout instead of being refused.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("127.0.0.1", 0))
    guard = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    guard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    guard.bind(listener.getsockname())
    listener.listen(128)
    listener.setblocking(False)
    return listener, guard


@pytest.fixture
def serve():
    servers, guards = [], []

    def start(api: FakeJobApi) -> str:
        loop = asyncio.new_event_loop()
        app = web.Application(middlewares=[api.token_check])
        app.add_routes([web.get("/api/version", api.version),
                        web.get("/api/packages/{protocol}/{name}", api.package_get),
                        web.put("/api/packages/{protocol}/{name}", api.package_put),
                        web.post("/api/jobs/", api.submit),
                        web.get("/api/jobs/{id}", api.job),
                        web.get("/api/jobs/{id}/logs/tail", api.tail)])
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        listener, guard = _listener_and_guard()
        loop.run_until_complete(web.SockSite(runner, listener).start())
        guards.append(guard)
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        servers.append((loop, runner, thread))
        return f"127.0.0.1:{listener.getsockname()[1]}"

    def stop() -> None:
        """The head goes away, as when KubeRay deletes the cluster: its port then refuses connections (the
        guard keeps it bound until the test ends, so nothing else listens there meanwhile)."""
        while servers:
            loop, runner, thread = servers.pop()
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    start.stop = stop
    yield start
    stop()
    for guard in guards:
        guard.close()


def run_submitter(address: str, code_dir, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # What KubeRay sets on the submitter container (rayjob_controller.go configureSubmitterContainer,
    # common/pod.go SetContainerTokenAuthEnvVars); the RAY_AUTH_TOKEN comes from the cluster's Secret.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "RAY_DASHBOARD_ADDRESS": address,
           "RAY_JOB_SUBMISSION_ID": JOB_ID, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    command = [sys.executable, "-m", "trainer.submitter", "--entrypoint", "python -m trainer.entrypoint --steps 8",
               "--runtime-env-json", f'{{"working_dir": "{code_dir}"}}', "--poll-seconds", "0.2", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def code_dir(tmp_path):
    directory = tmp_path / "code" / "trainer"
    directory.mkdir(parents=True)
    (directory / "entrypoint.py").write_text("print('training')\n")
    return tmp_path / "code"


def test_a_dropped_log_stream_and_a_status_outage_do_not_end_the_run(serve, tmp_path):
    api = FakeJobApi(run_s=4.0, outage=(1.0, 2.5))
    result = run_submitter(serve(api), code_dir(tmp_path), "--outage-limit-seconds", "5")
    assert result.returncode == 0, result.stderr
    assert api.unauthorised == []                        # every request carried the cluster's token
    assert api.submissions == 1 and api.entrypoint == "python -m trainer.entrypoint --steps 8"
    assert api.runtime_env["working_dir"].startswith("gcs://_ray_pkg_") and len(api.uploads) == 1
    assert api.tail_connections >= 2, result.stderr       # the stream dropped and was joined again
    assert result.stdout == "".join(LOG)                  # the whole driver log, each line once
    assert "status poll failed" in result.stderr and "ended: SUCCEEDED" in result.stderr


def test_an_outage_longer_than_the_limit_ends_the_submitter_with_exit_1(serve, tmp_path):
    api = FakeJobApi(run_s=30.0, outage=(0.5, 30.0))
    started = time.monotonic()
    result = run_submitter(serve(api), code_dir(tmp_path), "--outage-limit-seconds", "1.5", "--no-logs")
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 20 and "giving up" in result.stderr


def test_without_the_token_the_submitter_is_refused_in_one_line(serve):
    api = FakeJobApi(run_s=1.0, outage=(0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DASHBOARD_ADDRESS": serve(api),
           "RAY_JOB_SUBMISSION_ID": JOB_ID, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "wrong"}
    result = subprocess.run([sys.executable, "-m", "trainer.submitter", "--entrypoint", "python -m x", "--no-logs"],
                            env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 1 and api.submissions == 0
    assert [line for line in result.stderr.splitlines() if line.startswith("submitter: refused")]


class FakeKubeApi(http.server.ThreadingHTTPServer):
    """The Kubernetes API's two reads the submitter makes (trainer/kuberay_watch.py), with the pod's service
    account token: GET of its RayJob and of the RayCluster that RayJob names. Each read of the RayJob is
    counted and announced (`asked`), so the test acts on what the submitter did, never on elapsed time."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _KubeHandler)
        self.job_state = "Running"
        self.rayjob_reads = 0
        self.asked = threading.Condition()
        self.wrong_token = 0


class _KubeHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        api = self.server
        if self.headers.get("Authorization") != f"Bearer {SA_TOKEN}":
            api.wrong_token += 1
            return self._answer(401, {})
        if self.path == f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs/{RAYJOB}":
            body = {"status": {"jobDeploymentStatus": api.job_state, "rayClusterName": f"{RAYJOB}-x7k2p"}}
            self._answer(200, body)
            with api.asked:
                api.rayjob_reads += 1
                api.asked.notify_all()
        elif self.path == f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/{RAYJOB}-x7k2p":
            self._answer(404 if api.job_state == "Failed" else 200, {"metadata": {}})
        else:
            self._answer(404, {})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


SA_TOKEN, NAMESPACE, RAYJOB = "service-account-token", "train", "maxtext-train-abc"


def test_a_stopped_fake_head_refuses_and_its_port_cannot_be_taken(serve):
    """What the refused-head test below relies on: after `serve.stop()` a connection is refused, and no other
    socket (a Ray node's, another test's) can bind the port while the test runs."""
    host, port = serve(FakeJobApi(run_s=1.0, outage=(0, 0))).split(":")
    serve.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(OSError, match="in use"):
            thief.bind((host, int(port)))
    finally:
        thief.close()


def test_a_refused_head_is_waited_for_until_kuberays_objects_say_the_cluster_is_gone(serve, tmp_path):
    """The head's address refusing connections (kuberay v1.7.0 common/service.go: the head Service is headless
    with publishNotReadyAddresses, so this is a head pod with nothing listening) is not a deleted cluster: the
    submitter asks the Kubernetes API and keeps polling while the RayJob runs. Once KubeRay has failed the RayJob
    and deleted its RayCluster (rayjob_controller.go deleteClusterResources; not the submitter Job) it exits 0
    at once, instead of polling the dead address for the whole outage limit and being run again."""
    api = FakeJobApi(run_s=300.0, outage=(0, 0))
    address = serve(api)
    kube = FakeKubeApi()
    threading.Thread(target=kube.serve_forever, daemon=True).start()
    token_file = tmp_path / "token"
    token_file.write_text(SA_TOKEN + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "RAY_DASHBOARD_ADDRESS": address,
           "RAY_JOB_SUBMISSION_ID": JOB_ID, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN,
           "RAYJOB_NAME": RAYJOB, "RAYJOB_NAMESPACE": NAMESPACE,
           "TRAINER_KUBE_API_URL": f"http://127.0.0.1:{kube.server_address[1]}",
           "TRAINER_KUBE_TOKEN_FILE": str(token_file)}
    command = [sys.executable, "-m", "trainer.submitter", "--entrypoint", "python -m trainer.entrypoint",
               "--runtime-env-json", f'{{"working_dir": "{code_dir(tmp_path)}"}}', "--poll-seconds", "0.2",
               "--no-logs"]        # the outage limit keeps its 600 s
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert api.submitted.wait(60), "the job was never submitted"
        serve.stop()                                   # the head refuses connections from now on
        with kube.asked:
            # Three reads with the head refusing and the RayJob Running: still polling, never gone.
            assert kube.asked.wait_for(lambda: kube.rayjob_reads >= 3, timeout=60)
            assert process.poll() is None
            kube.job_state = "Failed"                  # KubeRay failed the RayJob and deleted its cluster
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        kube.shutdown()
    assert process.returncode == 0, stderr
    assert kube.wrong_token == 0
    [line] = [line for line in stderr.splitlines() if "the cluster is gone" in line]
    # A read between the two flips sees the RayJob still Running and then its RayCluster gone: either says so.
    assert line in ("submitter: the cluster is gone: RayJob Failed",
                    "submitter: the cluster is gone: its RayCluster was deleted"), line
