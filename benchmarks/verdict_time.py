"""Time per pre-flight verdict on this machine: XLA's compile of a run's step for its real TPU target, with the
workers' libtpu (aot/workers_libtpu.py, fetched into the user's cache) and the pods' LIBTPU_INIT_ARGS, one
compile at a time.

    .venv/bin/python benchmarks/verdict_time.py          # the program's verdict (kernels + memory-only): 8B prod, 70B
    .venv/bin/python benchmarks/verdict_time.py --full           # also the 8B prod step in full (tens of minutes)
    .venv/bin/python benchmarks/verdict_time.py --vmem           # also the VMEM evidence cases (below)
    .venv/bin/python benchmarks/verdict_time.py --eval           # also the eval steps (8B prod, 70B)
    .venv/bin/python benchmarks/verdict_time.py --case 8b-prod --mode memory-only --json out.json

Cases:
  dev              the dev stack's step (qwen3-0.6b, 2 x v6e-8, its batch), as the config build compiles it
  8b-prod          the prod stack's step (llama3-8b, 2 x v6e-16, its batch), the argv and LIBTPU_INIT_ARGS the
                   program's config build compiles (workloads/compile_check.py ProgramCompiler.target)
  70b-v6e-64-b4    llama3-70b on 1 x v6e-64 at batch 4 (a "fits" step of the issue), a Ray worker's argv and
                   LIBTPU_INIT_ARGS (preview/compile/runner.py request_target)
  8b-prod-noflags  8b-prod without the pods' LIBTPU_INIT_ARGS: XLA's default scoped VMEM (32 MiB)
  8b-prod-b5-noflags  the same at batch 5, where the issue's full compile refused 38.1 MiB of scoped VMEM
  1layer-noflags   8b-prod with one decoder layer (override_model_config), without the pods' flags: the same
                   attention kernels at the same shapes, a full compile in minutes (VMEM needs a full compile)
  1layer-flags     the same with the pods' flags (scoped VMEM raised to 96 MiB)
  8b-v6e-64-b13    llama3-8b on 1 x v6e-64 at batch 13, a Ray worker's argv and flags: XLA refuses its HBM
                   (E1000), the refusal class memory-only decides
  8b-prod-eval     the eval step of 8b-prod with an eval split (evalDatasetPath), at its eval batch (the train
                   batch: eval_per_device_batch_size unset), as the config build compiles it (aot/eval_compile.py
                   through workloads/compile_check.py ProgramCompiler.target(eval_batch=...))
  70b-v6e-64-b4-eval  the eval step of 70b-v6e-64-b4 (aot/eval_compile.py, its argv and flags)
  1layer-noflags-eval  the eval step of 1layer-noflags: its kernels alone are the forward kernel only
                   (aot/kernel_compile.py --eval), where the train step's backward kernel refuses scoped VMEM

Modes: memory-only (aot/runner.py run_compile memory_only: stop once XLA's HLO passes assigned memory), kernels
(aot/kernel_check.py run_kernel_check: the step's attention kernels alone), memory-only+kernels (the program's
verdict, aot/kernel_check.py run_verdict: the kernels, then memory-only when they fit) and full (the whole
compile, code generation included). A full 70B compile is not run: the calibration's full compiles
of 70B steps took 30 to 60 minutes per slice count here. Each row gives the machine's 1-minute load average
before and after its compile: the machine is shared, and the seconds scale with it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aot.kernel_check import run_kernel_check, run_verdict  # noqa: E402
from aot.runner import GIB, CompileResult, CompileTarget, installed, loaded_libtpu, run_compile  # noqa: E402

MEMORY_ONLY, FULL, KERNELS, MEMORY_KERNELS = "memory-only", "full", "kernels", "memory-only+kernels"
MODES = (MEMORY_KERNELS, MEMORY_ONLY, KERNELS, FULL)
TIMEOUT_S = 3600.0


def _stack(name: str, slices: int = 2) -> CompileTarget:
    """The committed stack's step at `slices`, as the program's config build compiles it."""
    from infra.config import build
    from preview.stack_files import load_stack_config
    from workloads.compile_check import ProgramCompiler

    config = build({**load_stack_config(name, ROOT), "compileCheck": "off"})
    return ProgramCompiler().target(config, slices)


def _prod(slices: int = 2) -> CompileTarget:
    return _stack("prod", slices)


def _without_flags(target: CompileTarget) -> CompileTarget:
    return dataclasses.replace(target, libtpu_init_args="")


def _one_layer(target: CompileTarget) -> CompileTarget:
    return target.with_keys({"override_model_config": "true", "base_num_decoder_layers": "1"},
                            plan=target.plan + ", 1 decoder layer")


def _llama70b() -> CompileTarget:
    from preview.compile.runner import RUN_PLACEHOLDER, request_target

    return request_target(["--model", "llama3-70b", "--generation", "v6e", "--topology", "8x8", "--slices", "1",
                           "--per-device-batch-size", "4", *RUN_PLACEHOLDER])


def _llama8b_v6e64_b13() -> CompileTarget:
    from preview.compile.runner import RUN_PLACEHOLDER, request_target

    return request_target(["--model", "llama3-8b", "--generation", "v6e", "--topology", "8x8", "--slices", "1",
                           "--per-device-batch-size", "13", *RUN_PLACEHOLDER])


def _prod_eval() -> CompileTarget:
    from infra.config import build
    from preview.stack_files import load_stack_config
    from workloads.compile_check import ProgramCompiler

    config = build({**load_stack_config("prod", ROOT), "compileCheck": "off", "datasetType": "grain",
                    "datasetPath": "gs://my-data/c4/train-*.array_record",
                    "evalDatasetPath": "gs://my-data/c4/eval-*.array_record", "evalSteps": "4"})
    plan = config.workload.plan
    return ProgramCompiler().target(config, plan.slices, eval_batch=plan.per_device_batch_size)


CASES: dict[str, Callable[[], CompileTarget]] = {
    "dev": lambda: _stack("dev"),
    "8b-v6e-64-b13": _llama8b_v6e64_b13,
    "8b-prod": _prod,
    "70b-v6e-64-b4": _llama70b,
    "8b-prod-noflags": lambda: _without_flags(_prod()),
    "8b-prod-b5-noflags": lambda: _without_flags(_prod().with_keys({"per_device_batch_size": "5"})),
    "1layer-noflags": lambda: _one_layer(_without_flags(_prod())),
    "1layer-flags": lambda: _one_layer(_prod()),
    "8b-prod-eval": _prod_eval,
    "70b-v6e-64-b4-eval": lambda: dataclasses.replace(_llama70b(), step="eval"),
    "1layer-noflags-eval": lambda: dataclasses.replace(_one_layer(_without_flags(_prod())), step="eval"),
}


def load() -> float:
    return os.getloadavg()[0]


def write_rows(path: Path, rows: list[dict]) -> None:
    """The rows as JSON with the machine and the time they were measured (both benchmarks' --json)."""
    path.write_text(json.dumps({"machine": machine(), "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                "rows": rows}, indent=2) + "\n")


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return f"{os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def verdict(result: CompileResult, kernels_only: bool = False) -> str:
    """XLA's answer in a few words: fits (with its figure), its refusal (error code and bytes) or undecided. For the
    kernels alone no HBM figure (their program's bytes are not the step's)."""
    if result.timed_out_after_s is not None:
        return f"undecided after {result.timed_out_after_s:.0f} s"
    if result.compiled and kernels_only:
        return "fits"
    if result.compiled:
        if result.peak_bytes_per_device:
            return f"fits, peak {result.peak_bytes_per_device / GIB:.2f} GiB"
        assigned = result.assigned or {}
        if result.before_remat_bytes or "need" in assigned:
            return f"fits, need {(result.before_remat_bytes or assigned['need']) / GIB:.2f} GiB"
        # Below XLA's rematerialization pass libtpu states the program's buffers only, not the train state.
        return "fits" + (f", program {assigned['program'] / GIB:.2f} GiB" if "program" in assigned else "")
    code = result.error_code or "no code"
    return f"refused: {code}" + (f" ({result.required_bytes / GIB:.2f} GiB)" if result.required_bytes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="only this case (repeatable)")
    parser.add_argument("--mode", action="append", choices=MODES, help="only this mode")
    parser.add_argument("--full", action="store_true", help="also the 8B prod step in full")
    parser.add_argument("--vmem", action="store_true", help="also the VMEM evidence cases")
    parser.add_argument("--eval", action="store_true", help="also the eval steps (8B prod, 70B)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per compile")
    parser.add_argument("--json", dest="json_path", help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    plan = [("8b-prod", MEMORY_KERNELS), ("70b-v6e-64-b4", MEMORY_KERNELS)]
    if args.full:
        plan.append(("8b-prod", FULL))
    if args.vmem:
        plan += [("1layer-noflags", KERNELS), ("1layer-flags", KERNELS), ("8b-prod-b5-noflags", KERNELS),
                 ("8b-v6e-64-b13", MEMORY_KERNELS),
                 ("1layer-noflags", MEMORY_ONLY), ("1layer-noflags", FULL), ("1layer-flags", FULL)]
    if args.eval:
        plan += [("8b-prod-eval", MEMORY_KERNELS), ("1layer-noflags-eval", KERNELS),
                 ("70b-v6e-64-b4-eval", MEMORY_KERNELS)]
    if args.case:
        modes = args.mode or [MEMORY_KERNELS, FULL]
        plan = [(case, mode) for case in args.case for mode in modes if not (case.startswith("70b") and mode == FULL)]

    print(f"# verdict time: {machine()}; MaxText {installed('maxtext')}, jax {installed('jax')}, libtpu "
          f"{loaded_libtpu()} (TPU_LIBRARY_PATH: the workers' pin)", flush=True)
    rows = []
    for case, mode in plan:
        target = CASES[case]()
        before = load()
        if mode == KERNELS:
            result = run_kernel_check(target, timeout=args.timeout, progress=sys.stderr)
        elif mode == MEMORY_KERNELS:
            result = run_verdict(target, timeout=args.timeout, progress=sys.stderr)
        else:
            result = run_compile(target, timeout=args.timeout, progress=sys.stderr, memory_only=mode == MEMORY_ONLY)
        row = {"case": case, "mode": mode, "step": target.step, "shape": f"{target.slices} x {result.topology}",
               "flags": "pods'" if target.libtpu_init_args else "none", "verdict": verdict(result, mode == KERNELS),
               "kernels": result.kernels,
               "seconds": round(result.seconds, 1), "load_before": round(before, 1), "load_after": round(load(), 1),
               "libtpu": result.libtpu, "reason": result.reason}
        rows.append(row)
        print(f"# {case} {mode}: {row['verdict']} in {result.seconds:.0f} s", file=sys.stderr, flush=True)

    print("| case | mode | shape | LIBTPU_INIT_ARGS | verdict | time | load before / after |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        minutes, seconds = divmod(int(row["seconds"]), 60)
        print(f"| {row['case']} | {row['mode']} | {row['shape']} | {row['flags']} | {row['verdict']} | "
              f"{minutes}m{seconds:02d}s | {row['load_before']} / {row['load_after']} |")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"machine": machine(), "measured": time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
