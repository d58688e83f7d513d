"""The JobSet path of "save at the notice": plain JAX processes (no Ray), as in a JobSet pod.

GKE's Spot notice is SIGTERM to the container's process (kubelet graceful node shutdown). JAX's preemption sync
manager, started by jax.distributed.initialize (jax/_src/distributed.py `initialize_preemption_sync_manager`,
on unless jax_enable_preemption_service is off), catches it and makes every process agree on a step
(jax/experimental/multihost_utils.py `reached_preemption_sync_point`: "the next step id (i.e., max + 1)");
MaxText 0.2.5 with enable_autocheckpoint saves that step and stops (maxtext/common/checkpointing.py
`_should_save_checkpoint_at_step`, `_handle_post_checkpoint_preemption`). trainer.jobset_run then exits
core.exit_codes.PREEMPTED (143), not MaxText's 0, so the pod is not counted as a completed index.

Two CPU processes of one JAX system run the CPU test model; one gets SIGTERM: both must save the same step (and
only that one besides step 0: no periodic save in the run) and exit 143.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import exit_codes
from core.maxtext_args import RunSettings, pre_train_argv
from core.planner import PlanRequest, plan

pytest.importorskip("maxtext")

REPO = Path(__file__).resolve().parents[2]
STEPS = 200
# The test's stand-in for what the JobSet pod's environment gives JAX (TPU_WORKER_HOSTNAMES, MEGASCALE_*): an
# explicit coordinator. Everything after it is trainer.jobset_run as the pod runs it.
SHIM = ("import sys, jax; jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2])); "
        "from trainer import jobset_run; sys.exit(jobset_run.main(sys.argv[3:]))")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _argv(output: Path) -> list[str]:
    from trainer.maxtext_runtime import base_config_path

    tiny = plan(PlanRequest("tiny", "v6e", "2x4", slices=1))
    run = RunSettings("jobset-notice", str(output), STEPS, STEPS, hardware="cpu")   # no periodic save but step 0
    return pre_train_argv(tiny, run, base_config_path())[1:]


def _start(argv: list[str], port: int, logs: Path) -> list[subprocess.Popen]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4", DECOUPLE_GCLOUD="TRUE",
               PYTHONPATH=str(REPO))
    procs = []
    for rank in range(2):
        log = open(logs / f"rank{rank}.log", "w")
        procs.append(subprocess.Popen([sys.executable, "-c", SHIM, f"127.0.0.1:{port}", str(rank), *argv],
                                      cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def _wait(procs, timeout_s=600):
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.wait(timeout=max(1, deadline - time.monotonic()))
    return [p.returncode for p in procs]


def _steps(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"completed step: (\d+)", log.read_text())]


def test_sigterm_saves_the_agreed_step_on_every_process_and_exits_143(tmp_path):
    argv = _argv(tmp_path / "out")
    first = tmp_path / "first"
    first.mkdir()
    procs = _start(argv, _free_port(), first)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (not _steps(first / "rank0.log") or max(_steps(first / "rank0.log")) < 3):
        assert all(p.poll() is None for p in procs), (first / "rank0.log").read_text()[-3000:]
        time.sleep(0.5)
    procs[1].send_signal(signal.SIGTERM)          # the notice reaches one host only
    codes = _wait(procs)
    log0 = (first / "rank0.log").read_text()
    assert codes == [exit_codes.PREEMPTED] * 2, log0[-3000:]
    saved = [int(s) for s in re.findall(r"saved at step (\d+) on notice", log0)]
    assert len(saved) == 1 and 3 <= saved[0] < STEPS - 1
    checkpoints = tmp_path / "out" / "jobset-notice" / "checkpoints"
    assert {p.name for p in checkpoints.iterdir()} - {"0"} == {str(saved[0])}
    log1 = (first / "rank1.log").read_text()
    assert f"saved at step {saved[0]} on notice" in log1          # the signalled host saved the same step

    # Resuming from that checkpoint is what the Ray end-to-end test proves (test_local_e2e.py).
