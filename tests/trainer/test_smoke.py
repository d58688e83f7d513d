"""trainer/smoke.py on CPU devices: passes when every device joined and the collectives add up, fails loudly
(exit 5 = core.exit_codes.SMOKE_FAILED, `SMOKE FAILED:`) when told to expect another count or when a collective is wrong; the Ray smoke job."""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.config import build
from preview.stack_files import load_stack_config
from core import exit_codes
from tests.conftest import MINIMAL, REPO
from trainer.smoke import SmokeFailure, slice_of_devices
from workloads.ray import spec as ray_inputs
from workloads.ray.component import ray_objects
from workloads.bundle import load_bundle


def cpu_env(devices_per_process: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
               PYTHONPATH=str(REPO))
    return env


def smoke(args: list[str], devices_per_process: int = 8, code: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "trainer.smoke", *args]
    return subprocess.run(command, cwd=REPO, env=cpu_env(devices_per_process), capture_output=True, text=True,
                          timeout=120)


def passed(result: subprocess.CompletedProcess) -> dict:
    [line] = [l for l in result.stdout.splitlines() if l.startswith("SMOKE PASSED ")]
    return json.loads(line[len("SMOKE PASSED "):])


def test_passes_on_8_cpu_devices_as_2_slices():
    result = smoke(["--expect-devices", "8", "--expect-slices", "2"])
    assert result.returncode == 0, result.stderr
    report = passed(result)
    assert report["devices"] == 8 and report["slices"] == 2
    assert report["expected"]["cross-slice all-reduce of slice ids"] == 1


def test_fails_loudly_when_told_to_expect_another_device_count():
    result = smoke(["--expect-devices", "16", "--expect-slices", "2"])
    assert result.returncode == exit_codes.SMOKE_FAILED == 5
    assert "SMOKE FAILED: jax.device_count()=8 but slices x devices per slice = 16" in result.stderr
    assert "SMOKE PASSED" not in result.stdout


def test_fails_when_a_collective_gives_the_wrong_answer():
    # A collective that silently does nothing (what a broken DCN path must never look like) is caught.
    code = ("import sys, jax; jax.lax.psum = lambda x, axis_name: x; "
            "from trainer import smoke; sys.exit(smoke.main(sys.argv[1:]))")
    result = smoke(["--expect-devices", "8", "--expect-slices", "2"], code=code)
    assert result.returncode == exit_codes.SMOKE_FAILED
    assert "SMOKE FAILED: all-reduce of ones gave [1]" in result.stderr


def test_bad_arguments_exit_2():
    result = smoke(["--expect-devices", "8", "--expect-slices", "3"])
    assert result.returncode == 2 and "--expect-slices=3" in result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_with_jax_distributed_form_one_system():
    port = _free_port()
    args = ["--expect-devices", "8", "--expect-slices", "2", "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", "2"]
    procs = [subprocess.Popen([sys.executable, "-m", "trainer.smoke", *args, "--process-id", str(i)], cwd=REPO,
                              env=cpu_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
        report = passed(subprocess.CompletedProcess([], 0, out, err))
        assert report["processes"] == 2 and report["local_devices"] == 4
        # 4 devices of process 0 and 4 of process 1: the sum of process indices is 4.
        assert report["expected"]["all-reduce of process indices"] == 4


class FakeDevice:
    def __init__(self, id_, process_index, platform="cpu", slice_index=0):
        self.id, self.process_index, self.platform, self.slice_index = id_, process_index, platform, slice_index


def test_slice_ids_follow_tpu_slice_index_or_process_order():
    tpu = [FakeDevice(i, i // 4, "tpu", slice_index=i // 8) for i in range(16)]
    assert slice_of_devices(tpu, 2) == [0] * 8 + [1] * 8
    cpu = [FakeDevice(i, 1 - i // 4) for i in range(8)]   # process 1 listed first
    assert slice_of_devices(cpu, 2) == [1] * 4 + [0] * 4
    with pytest.raises(SmokeFailure):
        slice_of_devices(cpu, 3)


# ---- the Ray smoke job ----------------------------------------------------------------------------------

def test_ray_smoke_gates_training_in_the_training_job():
    """One RayJob: smoke first, training only if it passed (two RayJobs would race for the TPU workers)."""
    config = build(load_stack_config("prod", REPO))
    objects = ray_objects(config, load_bundle())
    assert [o["kind"] for o in objects.values()].count("RayJob") == 1
    entry = objects["ray-job"]["spec"]["entrypoint"]
    command = shlex.split(entry)
    assert command[:2] == ["bash", "-c"]
    smoke, train = command[2].split(" && exec ")
    assert smoke.startswith("python -m trainer.smoke --ray ")
    for fragment in ("--model llama3-8b", "--generation v6e", "--topology 4x4", "--slices 2"):
        assert fragment in smoke
    assert shlex.split(train) == ray_inputs.entrypoint(config)
    assert "trainer/smoke.py" in {i["path"] for i in objects["ray-job"]["spec"]["submitterPodTemplate"]["spec"]
                                  ["volumes"][0]["configMap"]["items"]}
    off = ray_objects(build({**load_stack_config("prod", REPO), "smokeTest": False}), load_bundle())
    assert shlex.split(off["ray-job"]["spec"]["entrypoint"]) == ray_inputs.entrypoint(config)


def test_ray_smoke_uses_the_trainers_scaling_config():
    from trainer.entrypoint import scaling_kwargs
    from core.planner import PlanRequest, plan

    kwargs = scaling_kwargs(plan(PlanRequest(model="llama3-8b", generation="v6e", topology="4x4", slices=2)))
    assert kwargs["num_workers"] == 8 and kwargs["resources_per_worker"] == {"TPU": 4}
    assert kwargs["use_tpu"] is True and kwargs["topology"] == "4x4"


def test_ray_stack_exports_the_smoke_result_command():
    from preview.harness import run_program

    out = run_program(MINIMAL).outputs
    assert out["smokeJobName"] == out["rayJobName"]
    assert f"kubectl get rayjob -n tpu-training {out['smokeJobName']}" in out["smokeResultCommand"]
    assert f"-l job-name={out['smokeJobName']}" in out["smokeResultCommand"]


def test_ray_smoke_expects_two_devices_per_tpu7x_chip():
    """jax.device_count() on TPU7x is 2 x chips (MaxText src/maxtext/utils/accelerator_to_spec_map.py
    @e591f30c: "tpu7x: two cores per chip"); the smoke test must expect that, not the chip count."""
    from trainer.smoke import build_parser, ray_expectation, ray_plan

    args = build_parser().parse_args(["--ray", "--model", "llama3-8b", "--generation", "tpu7x",
                                      "--topology", "2x2x2", "--slices", "2"])
    expected = ray_expectation(ray_plan(args))
    assert (expected["devices"], expected["slices"]) == (2 * 2 * 8, 2)
    v6e = build_parser().parse_args(["--ray", "--generation", "v6e", "--topology", "4x4", "--slices", "2"])
    expected = ray_expectation(ray_plan(v6e))
    assert (expected["devices"], expected["slices"]) == (32, 2)


def test_the_smoke_test_of_a_run_kept_over_the_memory_limit_still_plans():
    """The smoke test reads only devices and slices from the plan: a stack kept over XLA's HBM limit
    (memoryCheck: false, after a compile that fits) has its smoke test too, where no batch fits the estimate."""
    from core.errors import PlanError
    from core.planner import PlanRequest, plan
    from trainer.smoke import build_parser, ray_expectation, ray_plan

    with pytest.raises(PlanError):
        plan(PlanRequest("llama3-70b", "v6e", "2x4", slices=2))
    args = build_parser().parse_args(["--ray", "--model", "llama3-70b", "--topology", "2x4", "--slices", "2"])
    expected = ray_expectation(ray_plan(args))
    assert (expected["devices"], expected["slices"]) == (16, 2)


def test_elastic_ray_smoke_checks_the_slices_the_group_got():
    """An elastic 1..2 run that got one slice passes its smoke test on that slice: the workers expect the
    devices of the whole slices in their group (world size / hosts per slice), not the configured maximum; the
    scaling config asks for MIN..MAX slices' workers, as the training job's does."""
    from trainer.entrypoint import scaling_kwargs
    from trainer.smoke import build_parser, expectation_for_world, ray_expectation, ray_plan

    args = build_parser().parse_args(["--ray", "--model", "llama3-8b", "--topology", "4x4", "--elastic", "1,2"])
    full = ray_plan(args)
    assert scaling_kwargs(full)["num_workers"] == (4, 8)
    config = ray_expectation(full)
    assert expectation_for_world(config, 4) == {"devices": 16, "slices": 1}
    assert expectation_for_world(config, 8) == {"devices": 32, "slices": 2}
    with pytest.raises(SmokeFailure):
        expectation_for_world(config, 6)


def test_ray_smoke_refuses_bad_elastic_bounds_with_exit_2(capsys):
    from trainer.smoke import main

    assert main(["--ray", "--elastic", "2,1"]) == exit_codes.CONFIG_ERROR
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_elastic_stacks_smoke_test_takes_the_jobs_bounds():
    """The dev stack trains elastically on 1..2 slices: its smoke test must be able to pass on the one slice the
    run may start with, so it gets the training job's --elastic MIN,MAX, and its workers expect what they got."""
    from trainer.smoke import build_parser, expectation_for_world, ray_expectation, ray_plan

    config = build(load_stack_config("dev", REPO))
    train = ray_inputs.entrypoint(config)
    smoke = ray_inputs.smoke_command(config)
    bounds = train[train.index("--elastic") + 1]
    assert smoke[smoke.index("--elastic") + 1] == bounds
    args = build_parser().parse_args(smoke[3:])
    full = ray_plan(args)
    one_slice = expectation_for_world(ray_expectation(full), full.shape.hosts)
    assert one_slice["slices"] == 1 and one_slice["devices"] == full.devices // full.slices
    fixed = ray_inputs.smoke_command(build(load_stack_config("prod", REPO)))
    assert "--elastic" not in fixed


def test_a_smoke_test_that_reaches_no_verdict_ends_at_its_deadline():
    """A join that never completes (here: process 1 of 2 whose coordinator never comes up, with JAX told to wait
    120 s) ends at the smoke test's deadline as an infrastructure failure (exit 1, retried), not after JAX's wait
    or never: on Spot no job deadline would end it while every slice bills."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # nothing listens there
    result = smoke(["--expect-devices", "16", "--expect-slices", "2", "--coordinator", f"127.0.0.1:{port}",
                    "--num-processes", "2", "--process-id", "1", "--init-timeout", "120", "--deadline", "5"])
    assert result.returncode == exit_codes.RUNTIME_FAILURE == 1, result.stderr
    assert "SMOKE NOT RUN (infrastructure): no verdict within 5 s" in result.stderr
    assert "SMOKE PASSED" not in result.stdout and "SMOKE FAILED" not in result.stderr


def test_the_deadline_follows_the_mode():
    """Ray: the start-up allowance a run gets (Ray Train retries a worker group that cannot start without limit);
    a distributed join: its own timeout (JAX's default 300 s, jax/_src/distributed.py initialize) plus the stall
    floor for the collectives; a local single-process check: none."""
    from core.run_bounds import STALL_FLOOR_S
    from core.run_time import STARTUP_ALLOWANCE_S
    from trainer.smoke import build_parser, deadline_seconds, main

    def deadline(*argv):
        return deadline_seconds(build_parser().parse_args(list(argv)))

    assert deadline("--ray") == STARTUP_ALLOWANCE_S
    assert deadline("--distributed", "--expect-devices", "8", "--init-timeout", "1680") == 1680 + STALL_FLOOR_S
    assert deadline("--distributed", "--expect-devices", "8") == 300 + STALL_FLOOR_S
    assert deadline("--expect-devices", "8") is None
    assert deadline("--ray", "--deadline", "90") == 90
    assert main(["--expect-devices", "8", "--deadline", "0"]) == exit_codes.CONFIG_ERROR
    # The JobSet's smoke command relies on the default (its join waits as long as Kueue lets the JobSet wait).
    from workloads.jobset.spec import jobset_spec
    from workloads.jobset.manifests import smoke_argv
    argv = smoke_argv(jobset_spec(build({**MINIMAL, "workloadBackend": "jobset"})))
    assert deadline(*argv[3:]) == float(argv[argv.index("--init-timeout") + 1]) + STALL_FLOOR_S
