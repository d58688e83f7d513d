"""Pre-flight compile (preview/compile/, `python -m preview --stack NAME --compile`).

Fast tests: the compiler's output is parsed from canned text (copied from real compiles: libtpu 0.0.42.1, MaxText
0.2.5), the subprocess path runs a stand-in for train_compile (tests/preview/fake_train_compile.py), and the argv
comes from each backend's own builder. The real compile is behind the `compile` marker (minutes; CI runs it
with `pytest -m compile`): test_real_compile_of_the_pathways_stack.
"""
from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

from aot import kernel_check
from aot import runner as aot_runner
from core.maxtext_args import pre_train_argv
from core.tpu_catalog import CATALOG
from infra.config import build
from preview import cli
from preview import compile as pf
from preview.model import build_plan
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO, committed_stack_run

G = 1024**3
FAKE = Path(__file__).with_name("fake_train_compile.py")

FITS_OUT = "Starting train_compile.py...\nJitting and compiling train step...\nJitting and compilation complete!\n"
FITS_LOG = (
    "I1122 deepsea_compiler_backend.cc:2127] XLA::TPU program HBM usage: 121.5K / 31.25G\n"
    "I1122 deepsea_compiler_backend.cc:2171] Total hbm usage >= 260.15M:\n"
    "    reserved        260.00M \n    program          121.5K \n    arguments            0B \n"
    "I1122 deepsea_compiler_hlo_passes.cc:5728] XLA::TPU rematerialization hbm reduction:  36.02G => 31.36G\n"
    "I1122 deepsea_compiler_backend.cc:2127] XLA::TPU program HBM usage: 18.63G / 31.25G\n"
    "I1122 deepsea_compiler_backend.cc:2171] Total hbm usage >= 31.21G:\n"
    "    reserved        260.00M \n    program          18.63G \n    arguments        12.33G \n")
OOM_OUT = ("Jitting and compiling train step...\nTraceback (most recent call last):\n    raise e\n"
           "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
           "HLO temporaries (44.02G) exceeds available HBM (31.25G).\n")
OOM_LOG = ("E1122 deepsea_compiler_base.cc:3781] XLA:TPU compile permanent error. Ran out of memory in memory space "
           "hbm. Used 44.02G of 31.25G hbm. Exceeded hbm capacity by 12.77G. Memory usage report: \n")


def test_a_step_that_fits_reports_libtpus_total_not_the_small_programs_and_the_remat():
    verdict = pf.parse_compiler_output(FITS_OUT, FITS_LOG, 0)
    assert verdict.compiled and verdict.reason is None
    assert verdict.peak_bytes_per_device == int(31.21 * G)          # the largest "Total hbm usage"
    assert verdict.hbm_bytes == int(31.25 * G)
    assert verdict.breakdown == {"reserved": int(260.00 * 1024**2), "program": int(18.63 * G),
                                 "arguments": int(12.33 * G)}
    assert verdict.before_remat_bytes == int(36.02 * G)
    # Exit status 0 without MaxText's "complete" line is not a compile.
    assert not pf.parse_compiler_output("Starting train_compile.py...\n", FITS_LOG, 0).compiled


def test_a_step_that_does_not_fit_reports_xlas_own_line_and_what_it_needs():
    verdict = pf.parse_compiler_output(OOM_OUT, OOM_LOG, 1)
    assert not verdict.compiled and verdict.peak_bytes_per_device is None
    assert verdict.reason == ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
                              "temporaries (44.02G) exceeds available HBM (31.25G).")
    assert verdict.required_bytes == int(44.02 * G) and verdict.hbm_bytes == int(31.25 * G)
    # Without libtpu's log the Python error alone still gives both numbers.
    alone = pf.parse_compiler_output(OOM_OUT, "", 1)
    assert (alone.required_bytes, alone.hbm_bytes) == (int(44.02 * G), int(31.25 * G))


@pytest.mark.parametrize("output, returncode, reason", [
    ("learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327\nERROR: Unknown command line flag 'xla_tpu_bogus'\n", 1,
     "ERROR: Unknown command line flag 'xla_tpu_bogus'"),
    ("Traceback (most recent call last):\n  File \"max_utils.py\", line 480\nAssertionError: Number of devices per "
     "slice 1 does not match the product of the ICI parallelism 16\n", 1,
     "AssertionError: Number of devices per slice 1 does not match the product of the ICI parallelism 16"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for MaxTextConfig\n", 1,
     "pydantic_core._pydantic_core.ValidationError: 1 validation error for MaxTextConfig"),
    ("Jitting and compiling train step...\nSegmentation fault\n", 139,
     "train_compile exited with status 139: Segmentation fault"),
    ("Jitting and compiling train step...\n", None, "the compile was stopped before it finished"),
])
def test_other_failures_report_the_line_that_explains_them(output, returncode, reason):
    verdict = pf.parse_compiler_output(output, "", returncode)
    assert not verdict.compiled and verdict.reason == reason


@pytest.mark.parametrize("generation, topology, name", [
    ("v6e", "2x4", "v6e-8"), ("v6e", "4x4", "v6e-16"), ("v5e", "4x4", "v5e-16"), ("v5p", "2x2x2", "v5p-16"),
    ("v4", "2x2x2", "v4-16"), ("tpu7x", "2x2x2", "tpu7x-16"),
])
def test_compile_topology_is_maxtexts_own_name(generation, topology, name):
    """maxtext/utils/accelerator_to_spec_map.py: v5p-16 is "v5:2x2x2", 8 megacore devices; tpu7x-16 16 devices."""
    from core.tpu_catalog import slice_shape

    shape = slice_shape(generation, topology)
    assert pf.compile_topology(shape.generation, topology, shape.devices) == name
    with pytest.raises(pf.CompileSetupError):
        pf.compile_topology(shape.generation, topology, shape.devices * 3)


def _target(**keys: str) -> pf.CompileTarget:
    argv = ["maxtext.trainers.pre_train.train", "src/maxtext/configs/base.yml", "model_name=qwen3-0.6b",
            "run_name=pathways-qwen3", "base_output_directory=gs://bucket/maxtext",
            "jax_cache_dir=gs://bucket/maxtext/jax_cache", "elastic_enabled=true", "per_device_batch_size=4",
            *(f"{k}={v}" for k, v in keys.items())]
    return pf.CompileTarget(argv=tuple(argv), source="test", generation=CATALOG["v5e"], topology="4x4",
                            devices_per_slice=16, slices=3, plan="qwen3 plan", model="qwen3-0.6b",
                            libtpu_init_args="--xla_tpu_enable_data_parallel_all_reduce_opt=true")


def _fake_run(tmp_path, monkeypatch, case: str, **kwargs) -> tuple[pf.CompileResult, dict, str]:
    record = tmp_path / f"record-{case}.json"
    monkeypatch.setenv("FAKE_COMPILE", case)
    monkeypatch.setenv("FAKE_COMPILE_RECORD", str(record))
    progress = io.StringIO()
    result = pf.run_compile(_target(), progress=progress, compiler=(sys.executable, str(FAKE)), **kwargs)
    return result, json.loads(record.read_text()), progress.getvalue()


def test_the_compile_runs_the_launch_argv_with_only_local_values_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")          # the compile process must not inherit a TPU platform
    result, seen, _ = _fake_run(tmp_path, monkeypatch, "fits")
    argv, env = seen["argv"], seen["env"]
    assert argv[0].endswith("maxtext/configs/base.yml") and Path(argv[0]).is_file()   # the installed base.yml
    keys = dict(item.split("=", 1) for item in argv[1:])
    assert keys["model_name"] == "qwen3-0.6b" and keys["per_device_batch_size"] == "4"
    assert keys["run_name"] == "preflight" and keys["jax_cache_dir"] == ""
    assert not keys["base_output_directory"].startswith("gs://")
    assert "elastic_enabled" not in keys and "elastic_enabled" in result.dropped
    assert argv[-2:] == ["compile_topology=v5e-16", "compile_topology_num_slices=3"]
    assert env["JAX_PLATFORMS"] == "cpu" and env["DECOUPLE_GCLOUD"] == "TRUE" and env["TPU_SKIP_MDS_QUERY"] == "1"
    assert env["LIBTPU_INIT_ARGS"] == "--xla_tpu_enable_data_parallel_all_reduce_opt=true"
    assert result.compiled and result.peak_bytes_per_device == int(7.49 * G) and result.hbm_bytes == int(15.75 * G)
    assert (result.topology, result.num_slices) == ("v5e-16", 3)
    assert result.log is None and not Path(env["TPU_LOG_DIR"]).exists()     # scratch removed after a success
    document = result.as_dict()
    assert {"compiled", "peak_bytes_per_device", "hbm_bytes", "topology", "num_slices", "seconds",
            "reason"} <= set(document)


def test_a_failed_compile_keeps_its_output_and_reports_xlas_reason(tmp_path, monkeypatch):
    result, _, _ = _fake_run(tmp_path, monkeypatch, "oom")
    assert not result.compiled and result.reason.startswith("RESOURCE_EXHAUSTED: Ran out of memory on HBM")
    assert result.required_bytes == int(44.02 * G)
    assert result.log and "RESOURCE_EXHAUSTED" in Path(result.log).read_text()
    out = io.StringIO()
    pf.render(result, out)
    assert "DOES NOT FIT: RESOURCE_EXHAUSTED" in out.getvalue()


def test_a_compile_that_hangs_is_stopped_and_progress_ticks(tmp_path, monkeypatch):
    result, _, progress = _fake_run(tmp_path, monkeypatch, "hang", timeout=1.5, tick_s=0.3)
    assert not result.compiled and result.reason == "the compile did not finish within 2 s"
    assert result.seconds < 30
    assert "elapsed (Jitting and compiling train step...)" in progress


# libtpu 0.0.42.1's log of qwen3-0.6b on 1 x v6e-8 (no rematerialization pass: no arguments line).
ASSIGNED_NO_REMAT = (
    "I1125 12:51:54.573921    9578 latency_hiding_scheduler.cc:4325] [latency-hiding-scheduler] LatencyHidingScheduler "
    "current memory usage: 11334904640 bytes. Current limit: 30918003712\n"
    "I1125 12:51:55.050106    9578 deepsea_compiler_hlo_passes.cc:6241] HLO_PASSES stage duration: 6.09597376725s\n")


# libtpu 0.0.50.1 (the workers'), llama3-70b on 1 x v6e-32 at batch 2.
ASSIGNED_050 = (
    "I1125 13:09:45.242365     445 latency_hiding_scheduler.cc:4597] [latency-hiding-scheduler] LatencyHidingScheduler "
    "current memory usage: 16108008704 bytes. Current limit: 20266192896\n"
    "I1125 13:09:45.740452     445 deepsea_compiler_hlo_passes.cc:6763] HLO_PASSES stage duration: 18.81144830225s\n")


def test_memory_assignment_is_read_when_xlas_hlo_passes_end():
    assert pf.memory_assignment(ASSIGNED_NO_REMAT.splitlines()[0]) is None          # passes not done yet
    assert pf.memory_assignment(ASSIGNED_NO_REMAT) == {"program": 11334904640}       # arguments come from the plan
    assert pf.memory_assignment(ASSIGNED_050) == {"program": 16108008704}
    with_remat = (FITS_LOG.replace("I1122 deepsea_compiler_hlo_passes.cc:5728]",
                                   "I1122 latency_hiding_scheduler.cc:4325] LatencyHidingScheduler current memory "
                                   "usage: 20249502912 bytes.\nI1122 x] rematerialization limit 29.63G = 95% hbm "
                                   "(29.68G) - (arguments (12.33G) - aliased_output(12.33G))\nI1122")
                  + "I1122 HLO_PASSES stage duration: 1s\n")
    figures = pf.memory_assignment(with_remat)
    assert figures["arguments"] == int(12.33 * G)
    assert (figures["need"], figures["after"]) == (int(36.02 * G), int(31.36 * G))   # XLA's own before => after


def test_memory_only_stops_after_memory_is_assigned(tmp_path, monkeypatch):
    monkeypatch.setattr(pf, "MEMORY_ONLY_GRACE_S", 0.5)
    result, _, _ = _fake_run(tmp_path, monkeypatch, "assigned", memory_only=True, timeout=50)
    assert result.seconds < 30                                   # not the 60 s of "code generation"
    assert result.compiled and result.memory_only and result.peak_bytes_per_device is None
    assert result.before_remat_bytes == int(31.19 * G) and result.assigned["after"] == int(29.23 * G)
    assert result.assigned["need"] == int(31.19 * G) and result.assigned["arguments"] == int(12.33 * G)


def test_memory_only_still_reports_a_step_that_does_not_fit(tmp_path, monkeypatch):
    result, _, _ = _fake_run(tmp_path, monkeypatch, "oom", memory_only=True)
    assert not result.compiled and result.required_bytes == int(44.02 * G)


def test_memory_only_waits_for_xlas_refusal_when_recomputing_left_it_over_the_limit(tmp_path, monkeypatch):
    """XLA's HLO passes can end with the step still over the limit after its rematerialization ("Can't reduce
    memory use below ..."); its RESOURCE_EXHAUSTED follows, later on a loaded machine than the grace period. The
    memory-only stop must not call that step compiled (it did, on this machine, for llama3-8b on v6e-64 at 13)."""
    monkeypatch.setattr(pf, "MEMORY_ONLY_GRACE_S", 0.5)
    result, _, _ = _fake_run(tmp_path, monkeypatch, "slow_oom", memory_only=True, timeout=50)
    assert not result.compiled and "RESOURCE_EXHAUSTED" in result.reason
    assert result.required_bytes == int(32.51 * G) and result.assigned["limit"] == int(29.68 * G / 0.95)
    assert pf.over_the_limit(result.assigned)


def _stack(stack: str):
    config = build(load_stack_config(stack, REPO))
    return config, build_plan(committed_stack_run(stack), config, stack, None)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_compiled_argv_is_the_backends_own(stack):
    """No second argv builder: JobSet's training_argv, Pathways' maxtext_argv (what trainer_command runs), and for
    Ray what the workers run (trainer.entrypoint --print-argv, from trainer.worker.worker_plan_and_argv), which is
    pre_train_argv of the stack's plan with the RayJob's run settings."""
    config, plan = _stack(stack)
    target = pf.stack_target(config, [m.obj for m in plan.manifests])
    backend = str(getattr(config.workload.backend, "value", config.workload.backend))
    if backend == "jobset":
        from workloads.jobset import spec
        assert list(target.argv) == spec.training_argv(config)
    elif backend == "pathways":
        from workloads.pathways import spec
        assert list(target.argv) == spec.maxtext_argv(config)
        command = spec.trainer_command(config)
        assert command[4:] == list(target.argv)[2:] and f"trainer.pathways_run {target.argv[1]}" in command[2]
    else:
        from workloads.ray import spec
        keys = target.keys
        assert keys["run_name"] == config.workload.run.run_name
        for key, value in config.workload.plan.overrides().items():
            assert keys[key] == value, key
        run_keys = {k: v for k, v in keys.items() if k not in config.workload.plan.overrides()}
        rebuilt = pre_train_argv(config.workload.plan, _ray_run_settings(config, run_keys), target.argv[1])
        assert list(target.argv) == rebuilt
    assert target.slices == config.tpu.slices and target.topology == config.tpu.shape.topology
    # The TPU pods' own LIBTPU_INIT_ARGS (as rendered); multislice v6e/v5e stacks send the DCN overlap flags.
    pods = [c for m in plan.manifests for c in _tpu_containers(m.obj)]
    assert pods and {e["value"] for c in pods for e in c["env"] if e["name"] == "LIBTPU_INIT_ARGS"} <= {
        target.libtpu_init_args}
    # What the config build compiles before any manifest exists (workloads/compile_check.py) is the same step.
    from workloads.compile_check import stack_target as before_any_manifest
    assert before_any_manifest(config) == target


def _ray_run_settings(config, keys):
    from core.maxtext_args import RunSettings
    from workloads.ray import spec

    return RunSettings(run_name=config.workload.run.run_name, base_output_directory=keys["base_output_directory"],
                       steps=int(keys["steps"]), checkpoint_period=int(keys["checkpoint_period"]))


def _tpu_containers(node):
    if isinstance(node, dict):
        resources = node.get("resources")
        if isinstance(resources, dict) and "google.com/tpu" in (resources.get("limits") or {}):
            yield node
        for value in node.values():
            yield from _tpu_containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tpu_containers(value)


def _canned(compiled: bool) -> pf.CompileResult:
    return pf.CompileResult(
        compiled=compiled, peak_bytes_per_device=int(7.49 * G) if compiled else None, hbm_bytes=int(15.75 * G),
        topology="v5e-16", num_slices=3, seconds=87.0,
        reason=None if compiled else "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
                                     "HLO temporaries (17.02G) exceeds available HBM (15.75G).",
        required_bytes=None if compiled else int(17.02 * G), source="test", libtpu="0.0.42.1")


@pytest.mark.parametrize("compiled", [True, False])
def test_cli_compile_option_prints_the_verdict_and_exits_4_when_it_does_not_fit(monkeypatch, capsys, compiled,
                                                                                  tmp_path):
    seen = []

    def fake_run(target, **kwargs):
        seen.append(target)
        return dataclasses.replace(_canned(compiled), num_slices=target.slices)

    monkeypatch.setattr(pf, "run_verdict", fake_run)
    code = cli.main(["--stack", "pathways", "--compile", "--json"])
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["compile"]["compiled"] is compiled and document["compile"]["topology"] == "v5e-16"
    # The pathways stack may lose one of its 3 slices: its fewest (2) first, the full group only if that fits.
    assert [t.slices for t in seen] == ([2, 3] if compiled else [2])
    assert all(t.source.startswith("pathways") for t in seen)
    if compiled:
        assert code == cli.EXIT_OK
    else:
        assert code == cli.EXIT_COMPILE == 4
        lines = err.splitlines()
        refusal = lines[lines.index(next(x for x in lines if "is refused by XLA" in x)):]
        assert refusal[0].startswith("tpu-multislice:perDeviceBatchSize=4 is refused by XLA on 2 x v5litepod-16: "
                                     "XLA needs 17.02 GiB per")
        assert "of 15.75" in " ".join(refusal[:2]) and "nearest to try: tpu-multislice:perDeviceBatchSize=3" in err
        assert "RESOURCE_EXHAUSTED" in err and all(len(line) <= 100 for line in refusal)
    monkeypatch.setenv("TPU_MULTISLICE_COMPILE_VERDICTS", str(tmp_path / "again.json"))   # compile again
    code = cli.main(["--stack", "pathways", "--compile"])
    out, _ = capsys.readouterr()
    assert ("FITS: XLA peak 7.49 GiB per device of 15.75 GiB HBM" in out) is compiled
    assert ("DOES NOT FIT: RESOURCE_EXHAUSTED" in out) is not compiled


@pytest.mark.compile
def test_real_compile_of_the_pathways_stack(request):
    """The real thing, on the cheapest stack (qwen3-0.6b on 3 x v5e-16, ~1.5-2 min here): MaxText's AOT compile
    fits and XLA's peak is the calibration row's (core/xla_calibration.json) within 2 %."""
    if "compile" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real compile (minutes): run with pytest -m compile")
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "preview", "--stack", "pathways", "--compile", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    compiled = json.loads(proc.stdout)["compile"]
    assert compiled["compiled"] and compiled["topology"] == "v5e-16" and compiled["num_slices"] == 3
    data = json.loads(pf.CALIBRATION_PATH.read_text())
    row = next(r for r in data["rows"] if r["case"] == "qwen3-0.6b-3xv5e-16-b4")
    # The row's figure for the libtpu that compiled here: the row itself (the workers' libtpu, memory only: XLA's
    # figure at memory assignment, a little under libtpu's final total), or the earlier full compile it keeps.
    if compiled["libtpu"] == row["libtpu"]:
        assert compiled["peak_bytes_per_device"] == pytest.approx(pf.row_peak(row, data), rel=0.05)
    else:
        assert compiled["libtpu"] == row["earlier"]["libtpu"]
        assert compiled["peak_bytes_per_device"] == pytest.approx(row["earlier"]["peak_bytes_per_device"], rel=0.02)


@pytest.mark.compile
def test_real_compile_refuses_what_the_planner_refuses_over_the_limit(request):
    """The held-out edge of the acceptance rule, compiled again (memory only, ~1 min here): llama3-8b on one v6e-64 at
    per-device batch 13, which the planner refuses (estimated 32.94 GiB, over XLA's 31.25), runs out of HBM in XLA
    too, as core/xla_calibration.json's row llama3-8b-1xv6e-64-b13 says. Under the libtpu this machine loads
    (TPU_LIBRARY_PATH for the workers' 0.0.50.1, as the calibration does; else requirements-trainer.txt's)."""
    if "compile" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("real compile (minutes): run with pytest -m compile")
    from core.planner import DoesNotFit, PlanRequest, plan

    case = next(c for c in pf.CALIBRATION_CASES if c.case == "llama3-8b-1xv6e-64-b13")
    with pytest.raises(DoesNotFit):
        plan(PlanRequest("llama3-8b", "v6e", "8x8", slices=1, per_device_batch_size=13))
    result = pf.run_compile(pf.request_target(case.entrypoint_args()), memory_only=True, timeout=1800)
    assert not result.compiled and "RESOURCE_EXHAUSTED" in result.reason, result.reason
    assert result.required_bytes > result.hbm_bytes


_STOPPABLE = """
import sys
from pathlib import Path
from tests.preview.test_compile import FAKE, _target
from preview import compile as pf
try:
    pf.run_compile(_target(), compiler=(sys.executable, str(FAKE)), timeout=600)
except (KeyboardInterrupt, getattr(pf, "CompileStopped", KeyboardInterrupt)):
    sys.exit(9)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state        # a zombie has ended; only its parent has not reaped it


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stopped_compile_stops_the_compile_worker_and_what_it_started(tmp_path, signum):
    """SIGTERM (or Ctrl-C) to `python -m preview --compile` left train_compile compiling. The
    compile runs in its own process group, which run_compile kills on the way out."""
    import os
    import signal
    import subprocess
    import time

    pids = tmp_path / "pids"
    env = {**os.environ, "FAKE_COMPILE": "helper", "FAKE_COMPILE_RECORD": str(tmp_path / "record.json"),
           "FAKE_COMPILE_PIDS": str(pids), "PYTHONPATH": str(REPO)}
    runner = subprocess.Popen([sys.executable, "-c", _STOPPABLE], cwd=REPO, env=env)
    deadline = time.monotonic() + 60
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert runner.poll() is None and time.monotonic() < deadline, "the stand-in compile never started"
        time.sleep(0.2)
    worker, helper = (int(pid) for pid in pids.read_text().split())
    try:
        assert _alive(worker) and _alive(helper)
        runner.send_signal(getattr(signal, signum))
        assert runner.wait(timeout=30) == 9         # the runner's own handler ran (no default-action death)
        deadline = time.monotonic() + 10
        while (_alive(worker) or _alive(helper)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "train_compile still runs after the preview was stopped"
        assert not _alive(helper), "train_compile's own helper still runs after the preview was stopped"
    finally:
        for pid in (worker, helper):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_an_elastic_stack_is_compiled_at_its_fewest_slices_first_and_refused_there(monkeypatch, capsys, tmp_path):
    """`--compile` compiled only the full group; dev (elastic 1..2 x v6e-8) shrinks to one slice, where
    XLA needs more per device (core/xla_calibration.json). Each distinct shape is compiled, the fewest slices first
    (its argv: the DCN axis at that count), and a refusal there is the run's verdict (exit 4)."""
    seen = []

    def fake_run(target, **kwargs):
        seen.append(target)
        return dataclasses.replace(_canned(target.slices > 1), num_slices=target.slices, topology="v6e-8")

    monkeypatch.setattr(pf, "run_verdict", fake_run)
    config = build(load_stack_config("dev", REPO))
    assert (config.workload.plan.min_slices, config.workload.plan.slices) == (1, 2)
    code = cli.main(["--stack", "dev", "--compile", "--json"])
    out, err = capsys.readouterr()
    assert [t.slices for t in seen] == [1]                     # refused at 1 slice: the full group is not needed
    assert seen[0].keys["dcn_data_parallelism"] == "1" and seen[0].estimate_bytes == (
        config.workload.plan.at_slices(1).memory.total)
    document = json.loads(out)["compile"]
    assert code == cli.EXIT_COMPILE and document["num_slices"] == 1 and len(document["shapes"]) == 1

    # XLA's verdict is kept (compile-verdicts.json, under the step's complete key): the same stack is refused
    # again from the kept verdict and nothing is compiled again (the program's config build reads the same key:
    # tests/infra/test_memory_check.py).
    seen.clear()
    assert cli.main(["--stack", "dev", "--compile", "--json"]) == cli.EXIT_COMPILE and seen == []
    assert "perDeviceBatchSize=4 is refused by XLA on 1 x v6e-8" in capsys.readouterr().err
    # With the config check off, the preview reads the kept verdict instead of compiling.
    assert cli.main(["--stack", "dev", "--set", "compileCheck=off", "--compile", "--json"]) == cli.EXIT_COMPILE
    document = json.loads(capsys.readouterr().out)["compile"]
    assert seen == [] and document["cached"] and not document["compiled"] and document["num_slices"] == 1

    monkeypatch.setenv("TPU_MULTISLICE_COMPILE_VERDICTS", str(tmp_path / "other-verdicts.json"))
    monkeypatch.setattr(pf, "run_verdict", lambda target, **kw: seen.append(target) or dataclasses.replace(
        _canned(True), num_slices=target.slices))
    assert cli.main(["--stack", "dev", "--compile", "--json"]) == cli.EXIT_OK
    document = json.loads(capsys.readouterr().out)["compile"]
    assert [t.slices for t in seen] == [1, 2] and [s["num_slices"] for s in document["shapes"]] == [1, 2]
    assert seen[1].keys["dcn_data_parallelism"] == "2"
    assert seen[0].libtpu_init_args == seen[1].libtpu_init_args    # the same pods run the smaller group


def test_compile_check_auto_compiles_every_step_without_a_verdict_and_says_when_it_cannot(monkeypatch, capsys):
    """compileCheck: auto, the default, has XLA decide every distinct step the run takes that has no kept
    verdict, "fits" by the estimate included (the estimate models HBM only, not XLA's other refusals): dev at
    batch 9 is compiled at 1 slice (nearest the limit) then 2; at batch 4 too; off compiles nothing; without
    MaxText or libtpu here the preview says so in one line (a warning with auto, exit 4 with always)."""
    seen = []
    monkeypatch.setattr(pf, "run_verdict", lambda target, **kw: seen.append(target) or dataclasses.replace(
        _canned(True), num_slices=target.slices))
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=9", "--json"]) == cli.EXIT_OK
    capsys.readouterr()
    assert [t.slices for t in seen] == [1, 2]
    seen.clear()
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=9", "--json"]) == cli.EXIT_OK
    assert seen == []                                            # kept: not compiled again
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=4", "--json"]) == cli.EXIT_OK    # fits
    capsys.readouterr()
    assert [t.slices for t in seen] == [1, 2]
    seen.clear()
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=10", "--set", "compileCheck=off",
                     "--json"]) == cli.EXIT_OK
    assert seen == []
    capsys.readouterr()

    # The compile itself again (not undo(): that would also drop the scratch verdicts file and the guard against
    # a real compile, tests/conftest.py), with MaxText missing, on a batch no compile above has decided.
    monkeypatch.setattr(pf, "run_verdict", kernel_check.run_verdict)
    without = aot_runner.front_end()
    without = dataclasses.replace(without, versions=tuple((name, "not installed") for name, _ in without.versions))
    monkeypatch.setattr(aot_runner, "front_end", lambda: without)    # the compile's interpreter has no MaxText
    # auto: a warning in one line, as the program's config build gives (exit 0); always: exit 4.
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=11"]) == cli.EXIT_OK
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("compile: maxtext is not installed here: bash scripts/setup.sh installs it, or set "
                       "compileCheck=off"), err
    assert cli.main(["--stack", "dev", "--set", "perDeviceBatchSize=11", "--set", "compileCheck=always"]) == (
        cli.EXIT_COMPILE)


def test_the_preview_decides_with_the_kernels_and_memory_only_unless_asked_for_the_full_compile(monkeypatch,
                                                                                                  capsys):
    """`--compile` decides as the program does (the kernels alone + memory-only, aot/kernel_check.py run_verdict);
    `--full-compile` asks for the full compile, kept under its own key (a full verdict is not re-read as the faster
    mode's here: the faster mode's file entry is another key)."""
    from core import compile_verdicts

    modes = []
    monkeypatch.setattr(pf, "run_verdict", lambda target, **kw: modes.append(kw["full"]) or dataclasses.replace(
        _canned(True), num_slices=target.slices))
    assert cli.main(["--stack", "pathways", "--compile", "--json"]) == cli.EXIT_OK
    assert modes == [False, False]
    assert cli.main(["--stack", "pathways", "--compile", "--full-compile", "--json"]) == cli.EXIT_OK
    assert modes == [False, False, True, True]
    capsys.readouterr()
    kept = compile_verdicts.load(compile_verdicts.verdicts_path(REPO)).values()
    assert sorted(verdict.key.get("mode", "full") for verdict in kept) == [
        "full", "full", "memory-only+kernels", "memory-only+kernels"]


def test_the_offline_plan_compiles_the_eval_step_beside_the_train_step_and_reports_its_refusal(monkeypatch, capsys):
    """A run with an eval split: `--compile` compiles each slice count's train step, then its eval step (the
    target's step "eval": aot/eval_compile.py), and XLA's refusal of the eval step exits 4 naming the eval step;
    `--json`'s compile shapes say which step each is."""
    seen = []

    def fake_run(target, **kwargs):
        seen.append(target)
        return dataclasses.replace(_canned(target.step == "train"), num_slices=target.slices, topology="v6e-8",
                                   step=target.step, argv=("base.yml", *target.argv[2:]))

    monkeypatch.setattr(pf, "run_verdict", fake_run)
    evaluating = ["--set", "datasetType=grain", "--set", "datasetPath=gs://my-data/train-*.array_record",
                  "--set", "evalDatasetPath=gs://my-data/eval-*.array_record", "--set", "evalSteps=2"]
    code = cli.main(["--stack", "dev", "--compile", "--json", *evaluating])
    out, err = capsys.readouterr()
    assert [(t.slices, t.step) for t in seen] == [(1, "train"), (1, "eval")], seen
    assert seen[1].argv == seen[0].argv                       # the eval step at the train batch: the pods' argv
    document = json.loads(out)["compile"]
    assert code == cli.EXIT_COMPILE and [s["step"] for s in document["shapes"]] == ["train", "eval"]
    assert document["step"] == "eval" and not document["compiled"]
    assert "tpu-multislice:perDeviceBatchSize=4 is refused by XLA in the eval step" in " ".join(err.split()), err
