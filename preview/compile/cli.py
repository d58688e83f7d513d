"""`python -m preview.compile`: one compile of a plan without a stack, or the calibration (--calibrate)."""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from core.cli_errors import OneLineParser
from preview.compile.runner import (CALIBRATION_PATH, DEFAULT_TIMEOUT_S, EXIT_BAD_INPUT, EXIT_DOES_NOT_COMPILE,
                                    EXIT_OK, PROJECT_ROOT, RUN_PLACEHOLDER, CompileSetupError, render,
                                    request_target, run_compile)
from preview.terminal import fit


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m preview.compile", description="Pre-flight: compile a MaxText training step for its real TPU target, here, on CPU.",
        epilog="Any other option goes to the planner as `python -m trainer.entrypoint` takes it, e.g. "
               "python -m preview.compile --model llama3-70b --topology 4x4 --slices 2 --per-device-batch-size 1. "
               "A stack's own step: python -m preview --stack NAME --compile.")
    parser.add_argument("--calibrate", action="store_true",
                        help=f"compile every calibration case and write {CALIBRATION_PATH.relative_to(PROJECT_ROOT)}")
    parser.add_argument("--case", action="append", default=[], help="with --calibrate: only this case (repeatable)")
    parser.add_argument("--out", type=Path, default=CALIBRATION_PATH, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per compile")
    parser.add_argument("--keep-logs", type=Path, help="with --calibrate: keep each compile's logs under this directory")
    parser.add_argument("--memory-only", action="store_true",
                        help="with --calibrate: stop each compile once XLA has assigned memory (seconds to a few "
                             "minutes instead of up to half an hour of code generation); rows then carry XLA's "
                             "figures at that point, not libtpu's final peak, and miss refusals XLA makes in code "
                             "generation (a kernel's scoped VMEM, E1001)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args, planner_args = parser.parse_known_args(argv)
    if args.calibrate:
        if planner_args:
            parser.error(f"--calibrate takes no planner options ({' '.join(planner_args)})")
        from preview.compile.calibration import calibrate
        return calibrate(args.case, args.out, sys.stderr, args.timeout, args.keep_logs, args.memory_only)
    if "--model" not in planner_args:
        parser.error("give --calibrate, or a model to plan and compile (--model NAME ...)")
    given = {a.split("=")[0] for a in planner_args}
    placeholders = [item for flag, value in zip(RUN_PLACEHOLDER[::2], RUN_PLACEHOLDER[1::2]) if flag not in given
                    for item in (flag, value)]
    try:
        target = request_target([*planner_args, *placeholders])
    except CompileSetupError as err:
        print(f"compile: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(fit(f"compile: {target.plan}"), file=sys.stderr)
    result = run_compile(target, timeout=args.timeout, progress=sys.stderr)
    if args.json:
        json.dump(result.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        text = io.StringIO()
        render(result, text)
        sys.stdout.write(fit(text.getvalue()))
    if not result.compiled:
        print(f"compile: {result.reason}", file=sys.stderr)
    return EXIT_OK if result.compiled else EXIT_DOES_NOT_COMPILE
