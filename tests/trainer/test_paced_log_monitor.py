"""The local cluster's log monitor: Ray's own script with its idle passes paced (trainer/local/paced_log_monitor.py),
started in its place by trainer/local/ray_loopback.py.

Ray 2.60's log monitor sleeps 0.1 s after a pass that published nothing (ray/_private/log_monitor.py `LogMonitor.run`)
and is started as `python -u .../ray/_private/log_monitor.py ARGS` (ray/_private/services.py `start_log_monitor`,
through `start_ray_process`). Measured on this machine, one idle head node for 30 s: Ray's pace 88 CPU ticks, the
paced one 35; a task's print still reached its driver.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from trainer.local import paced_log_monitor, ray_loopback

pytest.importorskip("ray")


def test_only_ray_s_idle_pass_is_paced_and_the_local_nodes_set_the_pace():
    from trainer.local.cluster import LOCAL_DAEMON_POLLING

    pace = float(LOCAL_DAEMON_POLLING[paced_log_monitor.IDLE_PASS_ENV])
    assert pace > paced_log_monitor.RAY_IDLE_PASS_S
    slept: list[float] = []
    sleep = paced_log_monitor.paced(slept.append, pace)
    sleep(paced_log_monitor.RAY_IDLE_PASS_S)
    sleep(2.0)
    sleep(0.05)
    assert slept == [pace, 2.0, 0.05]


def test_the_command_ray_builds_for_its_log_monitor_runs_the_paced_module(monkeypatch, tmp_path):
    """Ray's real start_log_monitor builds the command; the start patched as ray_loopback patches it hands
    `start_ray_process` the module in place of the script, every argument kept."""
    import ray._private.services as services

    launched: list[list[str]] = []
    monkeypatch.setattr(services, "start_ray_process", lambda command, *a, **k: launched.append(command))
    start = ray_loopback._start_paced_log_monitor(services.start_log_monitor)
    start(str(tmp_path), str(tmp_path / "logs"), "127.0.0.1:6379", "127.0.0.1", stdout_filepath=str(tmp_path / "o"),
          stderr_filepath=str(tmp_path / "e"))
    (command,) = launched
    assert command[:4] == [sys.executable, "-u", "-m", ray_loopback.PACED_LOG_MONITOR]
    assert f"--logs-dir={tmp_path / 'logs'}" in command and "--gcs-address=127.0.0.1:6379" in command
    assert services.start_ray_process is not start          # restored after the one call
    # Any other process Ray starts keeps its command.
    other = [sys.executable, "-u", "/x/ray/_private/monitor.py"]
    assert ray_loopback.paced_log_monitor_command(other) == other


def test_the_paced_module_runs_ray_s_own_script():
    done = subprocess.run([sys.executable, "-m", ray_loopback.PACED_LOG_MONITOR, "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--logs-dir" in done.stdout and "log monitor" in done.stdout.lower()
