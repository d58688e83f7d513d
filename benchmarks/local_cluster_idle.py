"""What the local cluster's own processes cost while no run trains: the CPU its Ray daemons take, per kind.

    .venv/bin/python benchmarks/local_cluster_idle.py                  # 2 slices of v6e 2x4, 60 s each way
    .venv/bin/python benchmarks/local_cluster_idle.py --slices 1 --seconds 120

A local cluster is one head and 2 hosts per v6e 2x4 slice, each a `ray start` with its own raylet, log monitor and
dashboard agent: daemons made for one host per machine, here five on two cores. The script starts the cluster
twice, with Ray's defaults and with the polling trainer.local gives its nodes (trainer/local/cluster.py
LOCAL_DAEMON_POLLING), waits while it idles, and prints each kind's CPU seconds over the window (utime + stime of
every process below the nodes' `ray start`, from /proc). The figures are this machine's at its load of the
moment, shown with them; a run's log directory grows with every worker it starts, which a fresh cluster's does
not, so a long run's log monitors cost more than these.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.tpu_catalog import slice_shape  # noqa: E402
from trainer.local import cluster as cluster_mod  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class RayDefaultsCluster(cluster_mod.LocalTpuCluster):
    """The same cluster with Ray's own polling intervals."""

    def node_env(self) -> dict[str, str]:
        env = super().node_env()
        for key in cluster_mod.LOCAL_DAEMON_POLLING:
            env.pop(key, None)
        return env


def _processes() -> dict[int, tuple[int, float, str]]:
    """{pid: (parent pid, CPU seconds, kind)} of every process readable in /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, _kind(command))
    return found


def _kind(command: str) -> str:
    # The raylet's own arguments name the agents it starts: its executable decides first.
    program = Path(command.split(" ", 1)[0]).name
    if program in ("raylet", "gcs_server"):
        return {"raylet": "raylet", "gcs_server": "GCS"}[program]
    # Ray's agents rename themselves (setproctitle): ray::DashboardAgent, ray::RuntimeEnvAgent.
    for marker, kind in (("log_monitor", "log monitor"), ("dashboard/agent", "dashboard agent"),
                         ("DashboardAgent", "dashboard agent"), ("runtime_env/agent", "runtime env agent"),
                         ("RuntimeEnvAgent", "runtime env agent"), ("ray::", "Ray worker"),
                         ("default_worker", "Ray worker"), ("ray_loopback", "ray start")):
        if marker in command:
            return kind
    return "other"


def _below(roots: set[int], processes: dict[int, tuple[int, float, str]]) -> set[int]:
    members, grew = set(roots), True
    while grew:
        grew = False
        for pid, (parent, _, _) in processes.items():
            if parent in members and pid not in members:
                members.add(pid)
                grew = True
    return members


def idle_cost(cluster_class, slices: int, seconds: float) -> Counter:
    """Start a cluster of `slices` v6e 2x4 slices, let it idle for `seconds`, return CPU seconds per kind."""
    work = Path(tempfile.mkdtemp(prefix="idle-"))
    ray_temp = Path(tempfile.mkdtemp(prefix="ri"))      # short: Ray's unix sockets live below it
    cluster = cluster_class(slice_shape("v6e", "2x4"), slices, work, ray_temp)
    try:
        cluster.start()
        time.sleep(10.0)                                  # past the start's own work
        roots = {node.process.pid for node in cluster.nodes}
        before = _processes()
        time.sleep(seconds)
        after = _processes()
        cost: Counter = Counter()
        for pid in _below(roots, after):
            _, cpu, kind = after[pid]
            cost[kind] += cpu - (before[pid][1] if pid in before else 0.0)
        return cost
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_temp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    print(f"local cluster: head + {args.slices} x v6e 2x4 ({1 + 2 * args.slices} nodes), idle {args.seconds:.0f} s; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    defaults, local = "Ray's defaults", "trainer.local"
    costs = {}
    for name, cluster_class in ((defaults, RayDefaultsCluster), (local, cluster_mod.LocalTpuCluster)):
        print(f"  {name}: starting the cluster", flush=True)
        costs[name] = idle_cost(cluster_class, args.slices, args.seconds)
    kinds = sorted(set().union(*costs.values()), key=lambda kind: -costs[defaults][kind])
    print(f"\n| process kind | {defaults} (CPU s) | {local} (CPU s) |\n| --- | --- | --- |")
    for kind in kinds:
        print(f"| {kind} | {costs[defaults][kind]:.1f} | {costs[local][kind]:.1f} |")
    totals = {name: sum(cost.values()) for name, cost in costs.items()}
    print(f"| all | {totals[defaults]:.1f} | {totals[local]:.1f} |")
    print(f"\nshare of one core over {args.seconds:.0f} s: "
          + ", ".join(f"{name} {total / args.seconds:.1%}" for name, total in totals.items())
          + f"; load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
