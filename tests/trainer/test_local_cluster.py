"""The local cluster's head gets three distinct ports (trainer/local/cluster.py pick_ports).

Ray refuses a node whose components share a port (ray/_private/parameter.py `RayParams.update_pre_selected_port`:
"Ray component client_server is trying to use a port number N that is used by other components"). Picking each
port by binding port 0 and closing the socket lets the OS hand the same port out again: Linux may return a just
closed port to the next bind(0). The fake OS below does that every time (lowest free port first), which makes
the collision deterministic instead of a matter of load.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from core.tpu_catalog import slice_shape
from trainer.local import cluster as cluster_mod


class ReusingOs:
    """bind(0) returns the lowest port not bound right now: a port is reused as soon as its socket closes."""

    def __init__(self, first: int, taken: set[int] = frozenset()):
        self.first, self.bound, self.taken = first, set(), set(taken)
        self.released: list[int] = []       # ports whose socket closed, in order: free for anyone from then on

    def socket(self, *args, **kwargs):
        os_ = self

        class FakeSocket:
            port = None

            def bind(self, address):
                port = address[1]
                if port:                                  # a given port
                    assert port not in os_.bound
                else:
                    port = os_.first
                    while port in os_.bound or port in os_.taken:
                        port += 1
                os_.bound.add(port)
                self.port = port

            def getsockname(self):
                return (cluster_mod.LOOPBACK, self.port)

            def close(self):
                os_.bound.discard(self.port)
                os_.released.append(self.port)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.close()

        return FakeSocket()


def _started_head(monkeypatch, tmp_path: Path) -> tuple[cluster_mod.LocalTpuCluster, list[str]]:
    """A cluster of a head alone, started with `ray start` stubbed out: the cluster and the head's arguments."""
    started: list[list[str]] = []
    local = cluster_mod.LocalTpuCluster(slice_shape("v6e", "2x4"), 0, tmp_path, tmp_path)
    monkeypatch.setattr(local, "_ray_start", lambda name, args, env, index: started.append(args) or cluster_mod.Node(name, None))
    monkeypatch.setattr(local, "_wait_started", lambda *a, **k: None)
    monkeypatch.setattr(local, "_wait_for_nodes", lambda *a, **k: None)
    local.start()
    (head_args,) = started
    return local, head_args


def _head_ports(monkeypatch, tmp_path: Path, fake_os: ReusingOs) -> list[int]:
    monkeypatch.setattr(cluster_mod.socket, "socket", fake_os.socket)
    local, head_args = _started_head(monkeypatch, tmp_path)
    ports = [int(a.split("=", 1)[1]) for a in head_args
             if a.split("=")[0] in ("--port", "--ray-client-server-port", "--dashboard-port")]
    assert len(ports) == 3
    assert local.address == f"{cluster_mod.LOOPBACK}:{ports[0]}"
    return ports


def test_head_ports_are_distinct_when_the_os_reuses_closed_ports(monkeypatch, tmp_path):
    ports = _head_ports(monkeypatch, tmp_path, ReusingOs(first=40587))
    assert len(set(ports)) == 3, ports


def test_head_ports_avoid_the_ports_ray_takes_for_itself(monkeypatch, tmp_path):
    # The OS would start inside Ray's worker port range and hand out the dashboard agent's default port.
    ports = _head_ports(monkeypatch, tmp_path, ReusingOs(first=19998, taken=set(range(20000, 52365))))
    assert len(set(ports)) == 3
    assert not set(ports) & (set(cluster_mod.RAY_WORKER_PORTS) | {cluster_mod.RAY_DASHBOARD_AGENT_PORT}), ports


def test_picked_ports_are_really_free_and_distinct():
    ports, kept = cluster_mod.pick_ports(5)
    assert kept == []
    assert len(set(ports)) == 5
    import socket

    for port in ports:        # each can be bound again now that pick_ports let go of it
        with socket.socket() as sock:
            sock.bind((cluster_mod.LOOPBACK, port))


def test_a_node_whose_start_timed_out_is_started_again(tmp_path):
    """`ray start` gives a raylet a fixed 30 s to register with the GCS (ray/_private/node.py `Node.__init__`:
    "The current node timed out during startup"); on a loaded machine a node can miss it. That node is started
    again instead of failing the whole local run."""
    import subprocess
    import sys

    local = cluster_mod.LocalTpuCluster(slice_shape("v6e", "2x4"), 0, tmp_path, tmp_path)
    outputs = iter(["Exception: The current node timed out during startup.", "Ray runtime started."])
    launches = []

    def launch(name, args, env, slice_index):
        log = tmp_path / f"{name}.log"
        offset = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            process = subprocess.Popen([sys.executable, "-c", f"print({next(outputs)!r}); import time; "
                                        + ("time.sleep(30)" if launches else "")],
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        launches.append(process)
        node = cluster_mod.Node(name, process, None, log, offset)
        node.relaunch = lambda: launch(name, args, env, slice_index)
        return node

    local._launch = launch
    node = local._ray_start("slice0-host0", [], {}, 0)
    local._wait_started(node, node.log_offset, timeout_s=60)
    assert len(launches) == 2 and node.process is launches[1]
    local.stop()
    assert launches[1].poll() is not None


def test_a_node_that_fails_otherwise_is_not_started_again(tmp_path):
    import subprocess
    import sys

    local = cluster_mod.LocalTpuCluster(slice_shape("v6e", "2x4"), 0, tmp_path, tmp_path)
    log = tmp_path / "n.log"
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-c", "print('ValueError: bad --resources')"], stdout=out)
    node = cluster_mod.Node("n", process, None, log, 0)
    node.relaunch = lambda: pytest.fail("started again")
    with pytest.raises(RuntimeError, match="exited during start"):
        local._wait_started(node, 0, timeout_s=30)



def test_every_start_of_a_node_gets_the_whole_timeout(monkeypatch, tmp_path):
    """At a load average of 36 the first start of a node can use most of the wait before `ray start` gives up;
    the start after it gets the whole timeout again, not what was left of it."""
    log = tmp_path / "n.log"
    log.write_text("")
    events = {5: "Exception: The current node timed out during startup.\n"}    # tick -> what `ray start` logs

    class Clock:                      # every poll of _wait_started is 10 s
        ticks = 0

        def monotonic(self):
            return self.ticks * 10.0

        def sleep(self, _s):
            self.ticks += 1
            with log.open("a") as out:
                out.write(events.get(self.ticks, ""))

    class Process:
        pid = 2**22 + 12345           # beyond pid_max's default: session_members finds no such process

        def __init__(self, exits_at):
            self.exits_at = exits_at

        def poll(self):
            return None if clock.ticks < self.exits_at else 1

    clock = Clock()
    monkeypatch.setattr(cluster_mod, "time", clock)
    local = cluster_mod.LocalTpuCluster(slice_shape("v6e", "2x4"), 0, tmp_path, tmp_path)
    node = cluster_mod.Node("n", Process(exits_at=5), None, log, 0)

    def relaunch():
        # The second start is up 30 s later: 80 s after the first began, within 60 s of its own start.
        events[clock.ticks + 3] = "Ray runtime started.\n"
        return cluster_mod.Node("n", Process(exits_at=10**6), None, log, log.stat().st_size)

    node.relaunch = relaunch
    local._wait_started(node, 0, timeout_s=60)
    assert clock.ticks == 8


def test_the_training_workers_get_a_fair_share_of_a_shared_machine(tmp_path):
    """Ray starts worker processes at nice 15 (src/ray/common/ray_config_def.h `worker_niceness`, default 15, "so
    that the OS prioritizes CPU for other processes over worker"): on a TPU host the other processes are Ray's
    own, but the local cluster's hosts share a machine with the test session and any neighbour at nice 0, which
    would take nearly every cycle from the workers and make a notice's save miss its grace. A real head node of
    the local cluster runs a task in a worker process at the session's own niceness (0 in CI)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    ray_temp = Path(tempfile.mkdtemp(prefix="rn"))     # short: Ray's unix sockets live below it (107 bytes)
    local = cluster_mod.LocalTpuCluster(slice_shape("v6e", "2x4"), 0, tmp_path, ray_temp)
    try:
        address = local.start()
        probe = ("import os, ray; ray.init(address=os.environ['ADDRESS'], logging_level='ERROR'); "
                 "print('worker nice', ray.get(ray.remote(lambda: os.nice(0)).remote()))")
        done = subprocess.run([sys.executable, "-c", probe], env={**local.driver_env(), "ADDRESS": address},
                              capture_output=True, text=True, timeout=300)
    finally:
        local.stop()
        shutil.rmtree(ray_temp, ignore_errors=True)
    assert f"worker nice {os.nice(0)}" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_head_s_unused_dashboard_port_is_held_until_the_cluster_stops(monkeypatch, tmp_path):
    """Ray Train's placement-group cleaner asks the head's --dashboard-port whether the controller lives, and reads
    an answer that does not list it as its death (ray/train/v2/_internal/execution/controller/
    placement_group_cleaner.py `_monitor_loop`, ray/train/v2/_internal/state/util.py `is_actor_alive`). The local
    head runs no dashboard: the port is held bound and never listening, so a question is refused and no other
    process binds it (a test's HTTP server once did, and the cleaner removed a healthy run's placement group)."""
    import socket

    local, head_args = _started_head(monkeypatch, tmp_path)
    dashboard = int(next(a for a in head_args if a.startswith("--dashboard-port=")).split("=", 1)[1])
    stranger = socket.socket()
    try:
        with pytest.raises(OSError):                      # EADDRINUSE: no other process takes it
            stranger.bind((cluster_mod.LOOPBACK, dashboard))
    finally:
        stranger.close()
    with pytest.raises(ConnectionRefusedError):           # and a question to it is refused, as with nothing there
        socket.create_connection((cluster_mod.LOOPBACK, dashboard), timeout=5).close()
    local.stop()
    free_again = socket.socket()
    free_again.bind((cluster_mod.LOOPBACK, dashboard))
    free_again.close()


def test_the_dashboard_port_is_never_free_between_its_pick_and_its_hold(monkeypatch, tmp_path):
    """Picked and then bound again, the port would be free for a moment in which any process on the machine could
    take it (the run 14 failure above, by another path): the socket that picked it is the one that holds it."""
    fake_os = ReusingOs(first=40587)
    ports = _head_ports(monkeypatch, tmp_path, fake_os)
    dashboard = ports[2]
    assert dashboard in fake_os.bound and dashboard not in fake_os.released
    assert set(ports[:2]) <= set(fake_os.released)       # the head's own ports are let go of for `ray start`
