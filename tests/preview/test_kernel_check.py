"""The attention kernels alone (aot/kernel_check.py, aot/kernel_compile.py): compiled from the step's own argv,
environment and pods' LIBTPU_INIT_ARGS through the same guarded subprocess as train_compile, and, for real
(`pytest -m compile`, the workers' libtpu), refused where the full compile refuses a kernel's scoped VMEM and
fitting with the pods' flags (measured: docs/planner.md "Time per verdict")."""
from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from aot import kernel_check, runner
from core import compile_verdicts
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from tests.preview.test_compile import FAKE, _target
from workloads.compile_check import ProgramCompiler

FAKE_KERNELS = REPO / "tests" / "preview" / "fake_kernel_compile.py"


def _stand_ins(monkeypatch, tmp_path, kernels: str, step: str = "fits") -> dict:
    monkeypatch.setenv("FAKE_KERNELS", kernels)
    monkeypatch.setenv("FAKE_KERNELS_RECORD", str(tmp_path / "kernels.json"))
    monkeypatch.setenv("FAKE_COMPILE", step)
    monkeypatch.setenv("FAKE_COMPILE_RECORD", str(tmp_path / "step.json"))
    return {"compiler": (sys.executable, str(FAKE)), "kernel_compiler": (sys.executable, str(FAKE_KERNELS))}


def test_the_kernels_are_compiled_from_the_steps_own_argv_and_flags(monkeypatch, tmp_path):
    """Same argv (base config, every key, the compile topology) and the same environment (the pods'
    LIBTPU_INIT_ARGS, JAX on CPU, the libtpu the step compiles with) as the step's compile."""
    target = _target()
    result = kernel_check.run_verdict(target, **_stand_ins(monkeypatch, tmp_path, "fits"))
    kernels = json.loads((tmp_path / "kernels.json").read_text())
    step = json.loads((tmp_path / "step.json").read_text())
    assert result.compiled and result.mode == compile_verdicts.MODE_MEMORY_KERNELS and result.kernels == "fits"
    assert result.memory_only                         # the step was compiled memory-only after the kernels
    def scratchless(argv):     # each compile has its own scratch directory
        return [item for item in argv if not item.startswith("base_output_directory=")]
    assert scratchless(kernels["argv"]) == scratchless(step["argv"]) and "compile_topology=v5e-16" in kernels["argv"]
    assert len(scratchless(kernels["argv"])) == len(kernels["argv"]) - 1
    for name in ("LIBTPU_INIT_ARGS", "JAX_PLATFORMS", "TPU_LIBRARY_PATH", "TPU_SKIP_MDS_QUERY"):
        assert kernels["env"].get(name) == step["env"].get(name), name
    assert kernels["env"]["LIBTPU_INIT_ARGS"] == target.libtpu_init_args


def test_a_kernel_refusal_is_the_steps_verdict_and_the_step_is_not_compiled(monkeypatch, tmp_path):
    result = kernel_check.run_verdict(_target(), **_stand_ins(monkeypatch, tmp_path, "vmem"))
    assert not result.compiled and result.error_code == "E1001 CompileTimeScopedVmemOom"
    assert result.reason.startswith("the attention kernels alone: RESOURCE_EXHAUSTED: E1001")
    assert result.peak_bytes_per_device is None and runner.kept(result)
    assert not (tmp_path / "step.json").exists()


def test_kernels_that_run_out_of_time_leave_the_step_undecided(monkeypatch, tmp_path):
    result = kernel_check.run_verdict(_target(), timeout=1.0, **_stand_ins(monkeypatch, tmp_path, "hang"))
    assert result.timed_out_after_s == 1 and not result.compiled and runner.kept(result)
    assert result.kernels == "undecided after 1 s" and not (tmp_path / "step.json").exists()


def test_the_full_mode_runs_train_compile_alone(monkeypatch, tmp_path):
    result = kernel_check.run_verdict(_target(), full=True, **_stand_ins(monkeypatch, tmp_path, "vmem"))
    assert result.compiled and result.mode == compile_verdicts.MODE_FULL and not result.memory_only
    assert not (tmp_path / "kernels.json").exists()


def test_outside_the_compile_marker_the_kernel_compile_is_no_real_compile():
    """tests/conftest.py points the compile at a module that does not exist; the kernel compile follows it."""
    assert kernel_check.kernel_command()[-1] == "tests.no_real_compile_outside_the_compile_marker"
    # An eval step's kernels: the same command with --eval (its forward kernels at the eval batch).
    evaluated = dataclasses.replace(_target(), step=compile_verdicts.STEP_EVAL)
    assert kernel_check.kernel_command(evaluated)[-2:] == ("tests.no_real_compile_outside_the_compile_marker",
                                                          "--eval")
    assert runner.step_program(evaluated, sys.executable)[-1] == "tests.no_real_compile_outside_the_compile_marker"


def _prod_in_one_layer(flags: bool) -> runner.CompileTarget:
    """The prod step (llama3-8b, 2 x v6e-16, batch 3) in one decoder layer: the same attention at the same
    shapes; with or without the pods' LIBTPU_INIT_ARGS."""
    config = build({**load_stack_config("prod", REPO), "compileCheck": "off"})
    target = ProgramCompiler().target(config, 2)
    target = target if flags else dataclasses.replace(target, libtpu_init_args="")
    return target.with_keys({"override_model_config": "true", "base_num_decoder_layers": "1"})


@pytest.mark.compile
@pytest.mark.parametrize("flags", [False, True])
def test_real_kernels_refuse_scoped_vmem_without_the_pods_flags_and_fit_with_them(request, flags):
    """XLA's full compile of this step without the pods' flags refused `splash_mha_dkv_segmented_no_residuals`
    (E1001, 35.96M of 32.00M scoped VMEM) after 9m53s; the kernels alone must refuse it the same way, and fit with
    the pods' --xla_tpu_scoped_vmem_limit_kib (about 40 s each here, idle)."""
    if "compile" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real compile (about a minute): run with pytest -m compile")
    if runner.missing_compiler():
        pytest.skip(runner.missing_compiler())
    result = kernel_check.run_kernel_check(_prod_in_one_layer(flags), timeout=1800)
    print(f"kernels ({'pods' if flags else 'no'} flags): {kernel_check.kernel_verdict(result)[:80]} "
          f"in {result.seconds:.0f} s, libtpu {result.libtpu}")
    if flags:
        assert result.compiled, result.reason
    else:
        assert result.error_code == "E1001 CompileTimeScopedVmemOom", result.reason
        log = open(result.log).read()
        assert "splash_mha_dkv_segmented_no_residuals" in log and "35.96M and limit 32.00M" in log


@pytest.mark.compile
def test_real_eval_step_of_the_dev_stack_compiles_with_its_own_forward_kernels(request, tmp_path):
    """The dev stack's eval step (an eval split added) on 1 slice, decided as the config build decides it: its
    attention kernels alone (aot/kernel_compile.py --eval: the forward kernel only, no dkv/dq backward kernels, at
    the eval batch), then aot/eval_compile.py memory-only. Both fit (qwen3-0.6b at batch 4, about 1-2 min here)."""
    if "compile" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real compile (minutes): run with pytest -m compile")
    if runner.missing_compiler():
        pytest.skip(runner.missing_compiler())
    from tests.preview.test_ci_compile import _dev_evaluating

    config = _dev_evaluating()
    target = ProgramCompiler().target(config, 1, eval_batch=config.workload.plan.per_device_batch_size)
    kernels = kernel_check.run_kernel_check(target, timeout=1800, keep_dir=tmp_path / "kernels")
    assert kernels.compiled, kernels.reason
    said = next(line for line in (tmp_path / "kernels" / "compile.log").read_text().splitlines()
                if line.startswith("Jitting and compiling the attention kernels"))
    assert "splash_mha_fwd" in said and "dkv" not in said and "dq" not in said, said
    step = runner.run_compile(target, memory_only=True, timeout=1800, keep_dir=tmp_path / "step")
    print(f"dev eval step: kernels {kernels.seconds:.0f} s, memory-only {step.seconds:.0f} s, libtpu {step.libtpu}")
    assert step.compiled and step.step == "eval", step.reason
    assert "Jitting and compiling eval step at 32 rows" in (tmp_path / "step" / "compile.log").read_text()
