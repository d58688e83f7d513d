"""CI compiles for real: one committed stack's step, compiled by MaxText's train_compile with libtpu (no stand-in),
in the suite `.ci/run` runs (marker `ci_compile`, which tests/conftest.py lets reach the real compiler).

The step: the dev stack's at its full group (qwen3-0.6b, 2 x v6e-8, the committed stacks' smallest per-device
step), memory only (aot/runner.py run_compile memory_only: XLA's HLO passes, memory assignment included, then
stopped before code generation): XLA's HBM verdict, about a minute on 2 cores (core/xla_calibration.json row
qwen3-0.6b-2xv6e-8-b4: 55 s). What it does not cover: code generation, where a kernel's scoped-VMEM refusal
(E1001) would show, and the other stacks' steps (`pytest -m compile` and `python -m preview --stack NAME
--compile` compile those)."""
from __future__ import annotations

import json

import pytest

from aot import runner
from infra.config import build
from preview import compile as pf
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.compile_check import ProgramCompiler


@pytest.mark.ci_compile
def test_the_dev_stacks_step_is_compiled_for_real_and_fits():
    assert runner.missing_compiler() is None, "CI installs MaxText and libtpu (scripts/setup.sh)"
    config = build(load_stack_config("dev", REPO))
    target = ProgramCompiler().target(config, 2)
    assert target.keys["per_device_batch_size"] == "4" and target.slices == 2
    result = runner.run_compile(target, memory_only=True, timeout=900)
    print(f"ci compile: {result.seconds:.0f} s, libtpu {result.libtpu}")
    assert result.compiled, result.reason
    assert result.key == runner.compile_key(target)          # the verdict's key is the compiled argv's
    assert result.assigned is not None and result.assigned["program"] > 0
    data = json.loads(pf.CALIBRATION_PATH.read_text())
    row = next(r for r in data["rows"] if r["case"] == "qwen3-0.6b-2xv6e-8-b4")
    if result.libtpu == row["libtpu"]:
        # The workers' libtpu (aot/workers_libtpu.py): XLA's figure is the calibration row's.
        assert result.assigned["program"] == pytest.approx(row["assigned"]["program"], rel=0.05)


def _dev_evaluating():
    """The dev stack with an eval split: MaxText compiles its eval step at start (aot/eval_compile.py here)."""
    return build({**load_stack_config("dev", REPO), "datasetType": "grain",
                  "datasetPath": "gs://my-data/c4/train-*.array_record",
                  "evalDatasetPath": "gs://my-data/c4/eval-*.array_record", "evalSteps": "2"})


@pytest.mark.ci_compile
def test_the_dev_stacks_eval_step_is_compiled_for_real_and_fits(tmp_path):
    """The eval step MaxText compiles at start (trainers/pre_train/train.py), built by aot/eval_compile.py on the
    dev stack's own argv (an eval split added) at its eval batch, memory only, through run_compile as the config
    build runs it: XLA's HBM verdict on the eval program (31-56 s here at a load of 4-15)."""
    assert runner.missing_compiler() is None, "CI installs MaxText and libtpu (scripts/setup.sh)"
    config = _dev_evaluating()
    target = ProgramCompiler().target(config, 2, eval_batch=config.workload.plan.per_device_batch_size)
    assert target.step == "eval" and target.keys["per_device_batch_size"] == "4"
    result = runner.run_compile(target, memory_only=True, timeout=900, keep_dir=tmp_path)
    print(f"ci eval compile: {result.seconds:.0f} s, libtpu {result.libtpu}")
    assert result.compiled, result.reason
    # The eval program (aot/eval_compile.py) at the eval batch's rows (4 x 16 devices), not train_compile's step.
    assert "Jitting and compiling eval step at 64 rows" in (tmp_path / "compile.log").read_text()
    assert result.step == "eval" and result.key.step == "eval" and result.key == runner.compile_key(target)
    assert result.assigned is not None and result.assigned["program"] > 0
