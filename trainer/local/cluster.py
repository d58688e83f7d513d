"""A Ray cluster on this machine whose nodes impersonate the hosts of TPU slices (docs/platform-notes.md §5).

One `ray start --head` (driver and Ray Train controller only, no TPU) plus one `ray start` per TPU host with
what a GKE TPU node would report: `TPU` chips, `accelerator_type:TPU-V6E`, the slice-head resource
`TPU-<pod type>-head` on worker 0 of each slice, the ray.io/tpu-* labels and the TPU_* environment.

Every `ray start --block` runs in a new session; the raylet, its workers and their children stay in it
(workers get their own process group, not their own session). So stopping a node = signalling the members
of its session: nothing else on the machine is touched (no `ray stop`, which kills every Ray process of the
user). Everything binds to 127.0.0.1, so Ray's token auth is disabled: nothing off this machine can connect.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.tpu_catalog import SliceShape
from trainer.local import paced_log_monitor

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
# Training data is synthetic and checkpoints go to disk: the object store only carries small control
# messages. Ray's default (30% of RAM per node) would reserve /dev/shm five times over.
OBJECT_STORE_BYTES = 256 * 1024**2
# Starts of one node when `ray start` gives up on a slow machine (LocalTpuCluster._wait_started): at a load average
# of 36 on 2 cores, all four hosts of a run missed Ray's 30 s twice in a row (2026-11-28).
START_ATTEMPTS = 5
# How long a node may take to start, all its attempts together: each attempt may use Ray's 30 s to register, and on
# a 2-core machine at load averages above 30 (eight engineers' tests at once) a head took more than 120 s.
NODE_START_S = 300.0


# Ports every `ray start` takes for itself unless told otherwise (ray/scripts/scripts.py defaults): the workers'
# range --min-worker-port..--max-worker-port and the dashboard agent's --dashboard-agent-listen-port
# (ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT). Ray refuses to start a node whose ports overlap
# (ray/_private/parameter.py `RayParams.update_pre_selected_port`: "... is trying to use a port number N that is
# used by other components").
RAY_WORKER_PORTS = range(10002, 19999 + 1)
RAY_DASHBOARD_AGENT_PORT = 52365
# Ray's config override of worker_niceness (ray/_private/ray_constants.py RAY_WORKER_NICENESS).
RAY_WORKER_NICENESS_ENV = "RAY_worker_niceness"
# How often each node's daemons poll (LocalTpuCluster.node_env says why).
LOCAL_DAEMON_POLLING = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "REPORTER_UPDATE_INTERVAL_MS": "60000",
                        paced_log_monitor.IDLE_PASS_ENV: "0.5"}


def pick_ports(count: int, keep: int = 0) -> tuple[list[int], list[socket.socket]]:
    """`count` distinct free loopback ports, none that Ray takes for itself, and the sockets of the last `keep` of
    them still bound (never listening: while one is open, a connection to its port is refused and no other
    process can bind it). Every socket stays bound until all are picked: a port is free again the moment its
    socket closes, so picking one at a time (bind port 0, close, bind again) can hand out the same port twice;
    and a port to hold is never let go of between its pick and its hold, when any process could take it."""
    held: list[socket.socket] = []
    picked: list[tuple[int, socket.socket]] = []
    try:
        while len(picked) < count:
            sock = socket.socket()
            held.append(sock)
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
            if port not in RAY_WORKER_PORTS and port != RAY_DASHBOARD_AGENT_PORT:
                picked.append((port, sock))
            if len(held) > count + 64:
                raise RuntimeError(f"could not find {count} free ports outside Ray's own on {LOOPBACK}")
    except BaseException:
        for sock in held:
            sock.close()
        raise
    kept = [sock for _, sock in picked[count - keep:]] if keep else []
    for sock in held:
        if sock not in kept:
            sock.close()
    return [port for port, _ in picked], kept


def session_members(sid: int) -> list[int]:
    """Pids whose session id is `sid` (Linux /proc), leader last so children are signalled first."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:      # fields after "(comm)": state ppid pgrp session ...
            members.append(int(entry.name))
    return sorted(members, key=lambda pid: pid == sid)


class ClusterStartError(RuntimeError):
    """A node of the local cluster did not come up: the run ends with this one line, not a traceback."""


def _is_raylet(pid: int) -> bool:
    """Whether `pid` runs Ray's raylet binary (ray/core/src/ray/raylet/raylet, as `ray start` launches it)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return argv0.endswith(b"/raylet")


@dataclass
class Node:
    name: str
    process: subprocess.Popen
    slice_index: int | None = None   # None for the head
    log: Path | None = None
    log_offset: int = 0
    relaunch: object = None          # starts this node again (same name, arguments and environment)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        # Ray puts each worker in its own process group, but all stay in the session `ray start` opened.
        for pid in session_members(self.process.pid):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


@dataclass
class LocalTpuCluster:
    shape: SliceShape
    slices: int
    workdir: Path
    ray_temp: Path                      # short path: Ray's unix sockets live below it
    base_env: dict[str, str] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    address: str = ""
    # The head's dashboard port, held for the cluster's life (start).
    dashboard_port_held: socket.socket | None = None

    def node_env(self) -> dict[str, str]:
        """Environment for the Ray nodes of this cluster (inherited by their workers)."""
        env = dict(os.environ)
        env.update(self.base_env)
        env["RAY_AUTH_MODE"] = "disabled"
        # Ray starts its workers at nice 15 (src/ray/common/ray_config_def.h worker_niceness: "the OS prioritizes
        # CPU for other processes over worker"), right on a TPU host, where the other processes are Ray's own.
        # Here the hosts share a machine with whatever else runs on it: at nice 15 a busy neighbour at nice 0
        # takes almost every cycle from the training workers (CFS weights 36 against 1024), and a notice's save
        # misses its grace. At 0 they get a fair share, as the only work of a real host would.
        env[RAY_WORKER_NICENESS_ENV] = "0"
        # Every `ray start` runs its own log monitor and dashboard agent, made for one host per machine; here five
        # hosts share two cores. The log monitor globs its node's log directory on every 0.1 s pass while it holds
        # fewer than RAY_LOG_MONITOR_MANY_FILES_THRESHOLD files, and at most every LOG_NAME_UPDATE_INTERVAL_S (0.5
        # s) above it (ray/_private/log_monitor.py `should_update_filenames`); the agent's reporter samples every
        # process of its node every REPORTER_UPDATE_INTERVAL_MS (5 s; dashboard/modules/reporter). Measured
        # (docs/development.md): the log monitors alone took about a seventh of the machine over the suite's runs.
        # Globbing every 0.5 s only delays the first line of a new worker's log by as much; no one reads the
        # node stats of a local cluster (its head runs no dashboard). Its idle passes are paced too
        # (trainer/local/paced_log_monitor.py, which trainer.local.ray_loopback starts in place of Ray's script).
        env.update(LOCAL_DAEMON_POLLING)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        return env

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver (ray.init) of this cluster: Ray's single-machine mode keeps it on
        loopback (nodes get the same from trainer.local.ray_loopback; the flag would stop a node from joining)."""
        return {**self.node_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

    def _ray_start(self, name: str, args: list[str], env: dict[str, str], slice_index: int | None) -> Node:
        node = self._launch(name, args, env, slice_index)
        self.nodes.append(node)
        return node

    def _launch(self, name: str, args: list[str], env: dict[str, str], slice_index: int | None) -> Node:
        log = self.workdir / "nodes" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log_offset = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "trainer.local.ray_loopback", "start", "--block", "--disable-usage-stats",
                 f"--object-store-memory={OBJECT_STORE_BYTES}",
                 f"--temp-dir={self.ray_temp / name}", *args],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=REPO_ROOT)
        node = Node(name, process, slice_index, log)
        node.log_offset = log_offset
        node.relaunch = lambda: self._launch(name, args, env, slice_index)
        return node

    def _wait_started(self, node: Node, log_offset: int, timeout_s: float = NODE_START_S) -> None:
        """Wait for `ray start` to report its node up. On a loaded machine `ray start` can give up by itself: it
        allows a raylet a fixed 30 s to register with the GCS (ray/_private/node.py `Node.__init__`, "The current
        node timed out during startup"). Such a node is stopped and started again, up to START_ATTEMPTS times,
        each start with TIMEOUT_S of its own."""
        deadline = time.monotonic() + timeout_s
        attempts = 1
        while time.monotonic() < deadline:
            with open(node.log, "rb") as handle:
                handle.seek(log_offset)
                text = handle.read()
            if b"Ray runtime started" in text:
                return
            if not node.alive:
                if b"timed out during startup" not in text or attempts >= START_ATTEMPTS:
                    raise ClusterStartError(f"ray node {node.name} exited during start; see {node.log}")
                node.kill(signal.SIGKILL)        # whatever the failed start left behind in its session
                fresh = node.relaunch()
                node.process, node.log_offset, log_offset = fresh.process, fresh.log_offset, fresh.log_offset
                deadline = time.monotonic() + timeout_s
                attempts += 1
                print(f"local: ray node {node.name} timed out registering with the GCS; starting it again "
                      f"(attempt {attempts} of {START_ATTEMPTS})", flush=True)
            time.sleep(0.2)
        raise ClusterStartError(f"ray node {node.name} did not start in {timeout_s:.0f}s (start {attempts} of "
                                f"{START_ATTEMPTS}); see {node.log}")

    def start(self, timeout_s: float = NODE_START_S) -> str:
        # The head holds the driver and the Ray Train controller: one CPU, no TPU, no training workers.
        # Fixed default ports of a head (GCS 6379, client server 10001, dashboard 8265) would clash with any other
        # local cluster on this machine: take free ones, all three picked together (pick_ports).
        (port, client_port, dashboard_port), (dashboard_socket,) = pick_ports(3, keep=1)
        # The head runs no dashboard, yet Ray names its --dashboard-port as the cluster's API server, and Ray Train's
        # placement-group cleaner asks that server every few seconds whether the controller lives
        # (ray/train/v2/_internal/execution/controller/placement_group_cleaner.py `_monitor_loop`, state/util.py
        # `is_actor_alive`: an answer that does not list the controller reads as dead). Nothing listens there, so
        # every question fails and the cleaner keeps waiting; but a free port can be taken by any other process
        # on the machine: in a clean-clone CI a test's HTTP server answered on it, the cleaner removed the e2e
        # run's placement group and a healthy group died as a failure. Held bound (never listening) until stop(),
        # the port refuses every connection and no one else can take it.
        self.dashboard_port_held = dashboard_socket
        self.address = f"{LOOPBACK}:{port}"
        head = self._ray_start("head", ["--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                                        f"--ray-client-server-port={client_port}", f"--dashboard-port={dashboard_port}"],
                               self.node_env(), None)
        self._wait_started(head, head.log_offset, timeout_s)
        for index in range(self.slices):
            self.add_slice(index, wait=False)
        for node in self.nodes:
            self._wait_started(node, node.log_offset, timeout_s)
        self._wait_for_nodes(1 + self.slices * self.shape.hosts, timeout_s)
        return self.address

    def slice_name(self, index: int) -> str:
        return f"local-{self.shape.pod_type}-{index}"

    def slice_count(self) -> int:
        """Slices with a live host (a preempted or killed slice counts once it is gone)."""
        return len({node.slice_index for node in self.nodes if node.slice_index is not None and node.alive})

    def add_slice(self, index: int, wait: bool = True, timeout_s: float = NODE_START_S) -> None:
        shape, gen = self.shape, self.shape.generation
        # A slice that comes back is new hosts: forget the ones it lost.
        self.nodes = [node for node in self.nodes if node.slice_index != index or node.alive]
        for worker_id in range(shape.hosts):
            resources = {"TPU": shape.chips_per_host, f"accelerator_type:{gen.ray_accelerator_type}": 1}
            if worker_id == 0:
                resources[f"TPU-{shape.pod_type}-head"] = 1
            labels = {
                "ray.io/tpu-slice-name": self.slice_name(index),
                "ray.io/tpu-worker-id": str(worker_id),
                "ray.io/tpu-pod-type": shape.pod_type,
                "ray.io/tpu-topology": shape.topology,
                "ray.io/accelerator-type": gen.ray_accelerator_type,
            }
            env = self.node_env()
            env.update({"TPU_NAME": self.slice_name(index), "TPU_WORKER_ID": str(worker_id),
                        "TPU_ACCELERATOR_TYPE": shape.pod_type, "TPU_TOPOLOGY": shape.topology})
            self._ray_start(
                f"slice{index}-host{worker_id}",
                [f"--address={self.address}", "--num-cpus=1", f"--resources={json.dumps(resources)}",
                 "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items())],
                env, index)
        # Every node has its own --temp-dir: nodes sharing one pick socket names by "first free index" and
        # two starting together collide ("bind: Address already in use"). With that, they can start at once.
        for node in self.nodes:
            if wait and node.slice_index == index:
                self._wait_started(node, node.log_offset, timeout_s)

    def _alive_node_count(self) -> int:
        probe = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                 "print(sum(1 for n in ray.nodes() if n['Alive']))")
        try:
            out = subprocess.run([sys.executable, "-c", probe, self.address], env=self.driver_env(),
                                 capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return 0        # a busy machine: _wait_for_nodes asks again until its own deadline, which it reports
        try:
            return int(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    def _wait_for_nodes(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n.name for n in self.nodes if not n.alive]
            if dead:
                raise ClusterStartError(f"ray node(s) {', '.join(dead)} exited; see {self.workdir / 'nodes'}")
            if self._alive_node_count() >= count:
                return
            time.sleep(1.0)
        raise ClusterStartError(f"local Ray cluster did not reach {count} nodes in {timeout_s:.0f}s")

    def kill_slice(self, index: int) -> None:
        """Lose a whole slice at once, as a preempted TPU slice does: SIGKILL its hosts' process groups."""
        for node in self.nodes:
            if node.slice_index == index:
                node.kill(signal.SIGKILL)
        for node in self.nodes:
            if node.slice_index == index:
                try:
                    node.process.wait(10)           # gone before anyone counts the slices that are up
                except subprocess.TimeoutExpired:
                    pass

    def preempt_slice(self, index: int) -> None:
        """The preemption notice GKE gives a Spot slice: SIGTERM to the main process of every host's pod, which
        for a KubeRay TPU pod is `ray start --block` (its handler drains the node, ray/_private/node.py). The
        rest of the session is left alone: on GKE the kubelet signals the container's main process only, and
        SIGKILLs what is left when the grace period ends (kill_slice)."""
        for node in self.nodes:
            if node.slice_index == index and node.alive:
                try:
                    os.kill(node.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def sigterm_raylets(self, index: int) -> None:
        """The slice's nodes go without Ray's drain: SIGTERM to each host's raylet, whose handler shuts the node
        down as EXPECTED_TERMINATION "received SIGTERM" (src/ray/raylet/main.cc), the form a reclaim takes when
        the raylet is killed before its drain deadline. `ray start` and the workers are left to notice (and to
        the kubelet's SIGKILL at the end of the grace period, kill_slice)."""
        for node in self.nodes:
            if node.slice_index == index and node.alive:
                for pid in session_members(node.process.pid):
                    if _is_raylet(pid):
                        try:
                            os.kill(pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass

    def stop(self, timeout_s: float = 15.0) -> None:
        """Kill every process this object started. SIGKILL at once: nothing here needs a graceful exit
        (checkpoints are committed by Orbax before they count), and a worker busy in XLA ignores SIGTERM."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(session_members(node.process.pid) for node in self.nodes):
                break
            for node in self.nodes:
                node.kill(signal.SIGKILL)
            time.sleep(0.2)
        for node in self.nodes:
            try:
                node.process.wait(1)
            except subprocess.TimeoutExpired:
                pass
        if self.dashboard_port_held is not None:
            self.dashboard_port_held.close()
            self.dashboard_port_held = None
