"""memoryCheck: false keeps a step the planner estimates over XLA's HBM limit, for when a compile of that exact step
fits; and the planner's notes on a run reach the user (the offline plan and `pulumi up`).

The case is one XLA compiled although the estimate is over its limit (core/xla_calibration.json
`llama3-70b-2xv6e-16-fsdp-b2`: llama3-70b on 2 x v6e-16, FSDP across the slices, batch 2)."""
from __future__ import annotations

import dataclasses
import io
import json
import logging

import pytest

from core.planner import PlanRequest, plan
from infra.config import ConfigError, build
from preview.compile import CALIBRATION_PATH
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.ray import spec as ray_spec

OVER = {"model": "llama3-70b", "tpuTopology": "4x4", "slices": "2", "perDeviceBatchSize": "2"}


def _raw(stack: str, **changes: str) -> dict:
    return {**load_stack_config(stack, REPO), **OVER, **changes}


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        build(raw)
    return refused.value.problems


def test_the_compiled_case_is_over_the_estimate():
    [row] = [r for r in json.loads(CALIBRATION_PATH.read_text())["rows"]
             if r["case"] == "llama3-70b-2xv6e-16-fsdp-b2"]
    assert row["compiled"] and (row["dcn_data"], row["dcn_fsdp"], row["per_device_batch_size"]) == (1, 2, 2)
    # With the memory check off and the layout left to the planner, it keeps the layout that compiled (the one
    # needing the fewest bytes per device), not the first it tried (data parallel across slices).
    kept = plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, per_device_batch_size=2, memory_check=False))
    assert (kept.dcn_data, kept.dcn_fsdp) == (1, 2)
    assert "--dcn-data 1 --dcn-fsdp 2" in kept.notes[0]


@pytest.mark.parametrize("stack", ["dev", "prod", "jobset"])
def test_refused_by_default_and_the_refusal_names_the_key(stack):
    [line] = [p for p in _problems(_raw(stack)) if " is over HBM: " in p]
    assert "memoryCheck: false" in " ".join(line.split())


@pytest.mark.parametrize("stack", ["dev", "prod", "jobset"])
def test_memory_check_false_keeps_the_step(stack):
    config = build(_raw(stack, memoryCheck="false"))
    chosen = config.workload.plan
    assert not config.workload.memory_check
    assert (chosen.per_device_batch_size, chosen.dcn_data, chosen.dcn_fsdp) == (2, 1, 2)
    assert chosen.memory.total > chosen.memory.hbm          # kept over the limit, and it says so
    assert chosen.notes[0].startswith("memory check off")
    # Spot (dev) looks for the fewest slices that fit by the estimate; none does, so the run is fixed-size.
    assert chosen.min_slices == chosen.slices


def test_the_ray_entrypoint_plans_again_with_the_memory_check_off():
    command = ray_spec.entrypoint(build(_raw("prod", memoryCheck="false")))
    assert "--no-memory-check" in command
    assert "--no-memory-check" not in ray_spec.entrypoint(build(load_stack_config("prod", REPO)))
    # The entrypoint plans it again from its own command (trainer/entrypoint.py prepare): the same step, kept.
    from trainer.entrypoint import prepare
    _, again, _ = prepare(command[3:])
    assert (again.dcn_data, again.dcn_fsdp, again.per_device_batch_size) == (1, 2, 2)
    with pytest.raises(Exception, match="does not fit"):
        prepare([flag for flag in command[3:] if flag != "--no-memory-check"])


def test_memory_check_false_needs_the_batch_a_compile_checked():
    raw = _raw("prod", memoryCheck="false")
    del raw["perDeviceBatchSize"]
    problems = _problems(raw)
    assert problems == ["tpu-multislice:memoryCheck=false keeps the exact step a compile fitted: set "
                        "tpu-multislice:perDeviceBatchSize too (the batch that compile used)"]


def test_memory_check_false_changes_nothing_for_a_step_that_fits():
    fits = load_stack_config("dev", REPO)
    on, off = build(fits), build({**fits, "perDeviceBatchSize": "4", "memoryCheck": "false"})
    assert off.workload.plan == on.workload.plan       # the same plan, elastic minimum found by the estimate too


def test_the_offline_plan_and_pulumi_up_show_the_planners_notes(caplog):
    from preview.cli import render_text
    from preview.model import build_plan

    raw = _raw("prod", memoryCheck="false")
    with caplog.at_level(logging.INFO):
        run = run_program(raw, stack="prod")
    logged = {r.levelno: r.getMessage() for r in caplog.records if r.getMessage().startswith("plan: ")}
    assert logged[logging.WARNING].startswith("plan: memory check off: estimated 31.9 GiB per device")
    text = io.StringIO()
    render_text(build_plan(run, build(raw), "prod", None), None, text)
    section = text.getvalue().split("\nPlanner")[1].split("\nExports")[0]
    assert "memory check off" in section and "python -m preview.compile --model llama3-70b" in " ".join(section.split())
    assert "memoryCheck is false: this step runs on your word" in " ".join(text.getvalue().split())

    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_program(load_stack_config("prod", REPO), stack="prod")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and r.getMessage().startswith("plan: ")]
    assert any(line.startswith("plan: shape: per_device_batch_size up to") for line in info), info


def test_an_elastic_step_kept_over_the_limit_names_the_compile_at_its_fewest_slices():
    # The fewest slices hold the most bytes per device (the same model over fewer FSDP ways): that is the step the
    # compile must fit, as the refusal's own compile command is.
    kept = plan(PlanRequest("llama3-70b", "v6e", "4x4", slices=2, min_slices=1, per_device_batch_size=2,
                            memory_check=False))
    assert (kept.min_slices, kept.slices) == (1, 2)
    assert "--slices 1 --dcn-data 1 --dcn-fsdp 1" in kept.notes[0]
    fewest = kept.at_slices(1).memory.total
    assert fewest > kept.memory.total and f"estimated {fewest / 2**30:.1f} GiB" in kept.notes[0]


def test_the_preflight_compile_of_a_kept_step_targets_that_step():
    """`python -m preview --stack NAME --compile` builds the argv the workers would run (preview/compile/
    stack_target, through trainer.entrypoint --print-argv): the kept step, FSDP across the slices at batch 2."""
    from preview.compile import stack_target

    target = stack_target(build(_raw("prod", memoryCheck="false")))
    keys = dict(item.split("=", 1) for item in target.argv if "=" in item)
    assert (keys["dcn_data_parallelism"], keys["dcn_fsdp_parallelism"], keys["per_device_batch_size"]) == ("1", "2", "2")
    assert "does not fit" in target.plan          # the estimate says so; the compile decides


def test_the_dev_stack_at_batch_12_is_not_a_fit_on_its_one_slice_minimum():
    """dev (Spot, 2 x v6e-8, shrinking to the fewest slices that fit) called batch 12 a fit on 1..2
    slices; XLA refuses batch 12 on one slice (core/xla_calibration.json qwen3-0.6b-1xv6e-8-b12). Asked for 1..2
    slices it is refused; left to the planner, the run keeps 2 slices and says why it cannot shrink to one."""
    raw = {**load_stack_config("dev", REPO), "perDeviceBatchSize": "12"}
    kept = build(raw).workload.plan
    assert (kept.min_slices, kept.slices) == (2, 2)
    assert any(note.startswith("elastic: keeps at least 2 slices") and "on 1 the step does not fit" in note
               for note in kept.notes), kept.notes
    problems = _problems({**raw, "elasticMinSlices": "1"})
    assert len(problems) == 1 and "perDeviceBatchSize" in problems[0].split("\n")[0]
    assert "nearest that fits: tpu-multislice:perDeviceBatchSize=11" in problems[0]
    assert build({**raw, "perDeviceBatchSize": "11"}).workload.plan.min_slices == 1


def test_an_elastic_pathways_run_is_planned_at_its_fewest_slices():
    """Pathways resizes too (pathwaysElasticSlices slices may be lost), so its plan covers slices -
    pathwaysElasticSlices .. slices; a step that fits only on the full group is refused, naming the key."""
    raw = load_stack_config("pathways", REPO)
    chosen = build(raw).workload.plan
    assert (chosen.min_slices, chosen.slices) == (int(raw["slices"]) - int(raw["pathwaysElasticSlices"]), 3)
    assert build({**raw, "pathwaysElasticSlices": "0"}).workload.plan.min_slices == 3
    # Batch 10 is accepted on the full group (near the limit) and refused on one slice (the tied head's logits).
    assert build({**raw, "perDeviceBatchSize": "10", "pathwaysElasticSlices": "0"}).workload.plan
    problems = _problems({**raw, "perDeviceBatchSize": "10", "pathwaysElasticSlices": "2"})
    assert "pathwaysElasticSlices=2" in problems[0] and "elasticMinSlices" not in problems[0]


def test_a_step_xla_refused_is_refused_by_the_config_build(tmp_path, monkeypatch):
    """XLA's verdict decides. A kept refusal (compile-verdicts.json, under the step's complete key) at any slice
    count the run takes refuses the stack before anything registers: the key, XLA's bytes and error code, the
    nearest batch XLA compiled, in lines of at most 100 columns. Without a compiler the build says nothing of
    XLA (the offline plan compiles after it); compileCheck=off reads no verdict."""
    import os

    from core import compile_verdicts
    from workloads.compile_check import ProgramCompiler

    class LookUpOnly(ProgramCompiler):
        def __call__(self, config, slices):
            raise AssertionError(f"compiled {slices} slice(s): the kept verdict should have decided")

    raw = {**load_stack_config("dev", REPO), "perDeviceBatchSize": "10", "elasticMinSlices": "1"}
    config = build(raw)
    assert not any("XLA did not decide" in note or "XLA compiled" in note for note in config.workload.plan.notes)
    path = compile_verdicts.verdicts_path(REPO)
    assert str(path) == os.environ[compile_verdicts.PATH_ENV]          # a scratch file (tests/conftest.py)
    compiler = LookUpOnly()
    refused = compile_verdicts.Verdict(
        compiled=False, shape="dev at 1 slice", slices=1, libtpu="0.0.50.1", maxtext="0.2.5",
        reason="RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: Ran out of memory in memory space vmem",
        error_code="E1001 CompileTimeScopedVmemOom", per_device_batch_size=10)
    compile_verdicts.record(path, compiler.key(config, 1), refused)
    compile_verdicts.record(path, compiler.key(config, 1, 8), dataclasses.replace(
        refused, compiled=True, reason=None, error_code=None, per_device_batch_size=8))
    with pytest.raises(ConfigError) as error:
        build(raw, compile_step=compiler)
    [problem] = error.value.problems
    lines = problem.split("\n")
    assert lines[0].startswith("tpu-multislice:perDeviceBatchSize=10 is refused by XLA on 1 x v6e-8")
    assert "E1001 CompileTimeScopedVmemOom" in " ".join(problem.split())
    assert "nearest that compiled: tpu-multislice:perDeviceBatchSize=8" in problem
    assert all(len(line) <= 100 for line in lines), lines
    built = build({**raw, "compileCheck": "off"}, compile_step=compiler)
    assert built.workload.plan.per_device_batch_size == 10


def test_a_run_with_an_eval_split_has_its_eval_step_planned_by_the_stack_and_the_trainer():
    """evalDatasetPath makes MaxText run its eval step (forward only, at eval_per_device_batch_size: MaxText 0.2.5
    configs/types.py takes per_device_batch_size when unset). The config build plans it at every slice count (the
    verdict is the worse step's), the RayJob's trainer plans the same, and an eval batch that does not fit on the
    run's one-slice minimum is refused before anything registers."""
    from trainer import cli
    from trainer.entrypoint import build_parser

    raw = {**load_stack_config("dev", REPO), "datasetType": "grain",
           "datasetPath": "gs://my-data/c4/train-*.array_record",
           "evalDatasetPath": "gs://my-data/c4/eval-*.array_record", "evalSteps": 1,
           "perDeviceBatchSize": "8"}
    chosen = build(raw).workload.plan
    assert chosen.evaluates and chosen.min_slices == 1
    assert any(note.startswith("eval step: forward only at per_device_batch_size 8") for note in chosen.notes)
    config = build(raw)
    args = build_parser().parse_args(ray_spec.entrypoint(config)[3:])
    assert plan(cli.plan_request(args, default_slices=1)) == chosen
    assert not build({k: v for k, v in raw.items() if k != "evalDatasetPath"}).workload.plan.evaluates

    # On Spot the run keeps the fewest slices both steps fit on; with its minimum set to one slice it is refused.
    bigger = {**raw, "maxtextSettings": {"eval_per_device_batch_size": 16}}
    kept = build(bigger).workload.plan
    assert kept.min_slices == 2 and any("keeps at least 2 slices" in note for note in kept.notes)
    [problem] = _problems({**bigger, "elasticMinSlices": "1"})
    assert problem.startswith("tpu-multislice:perDeviceBatchSize='8' is over HBM"), problem
    assert "in its eval step" in " ".join(problem.split())
