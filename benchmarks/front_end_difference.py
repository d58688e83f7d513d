"""How much the jax front end changes XLA's verdict: the same steps compiled the program's way (aot/kernel_check.py
run_verdict: the attention kernels alone, then the step memory-only), with the same libtpu (the workers' pin,
aot/workers_libtpu.py), the pods' argv and LIBTPU_INIT_ARGS, once under this interpreter's jax and once under
another interpreter's (aot/compile_python.py TPU_MULTISLICE_COMPILE_PYTHON), one compile at a time.

    .venv/bin/python benchmarks/front_end_difference.py --other-python PYTHON               # dev, then 8b-prod
    .venv/bin/python benchmarks/front_end_difference.py --other-python PYTHON --case 70b-v6e-64-b4 --json out.json

PYTHON: an interpreter with the workers' jax, jaxlib and MaxText (worker_env/requirements.lock; jax 0.12 needs
Python >= 3.12), or a script that runs one. Cases are benchmarks/verdict_time.py's (dev: the dev stack's step).

Figures compared, per device, from libtpu's log when XLA's HLO passes end (aot/runner.py memory_assignment):
`program` (the latency-hiding scheduler's peak of the program's own buffers), `arguments` (the step's inputs),
`need` (program + arguments, or XLA's own figure before recomputing), `after` (after recomputing), and the
verdict itself (kernels and HBM). Each compile's seconds and the machine's 1-minute load before and after it are
printed: the machine is shared, and the seconds scale with the load.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aot.compile_python import COMPILE_PYTHON_ENV, CompilePythonError, front_end  # noqa: E402
from aot.kernel_check import run_verdict  # noqa: E402
from aot.runner import GIB, CompileResult, loaded_libtpu  # noqa: E402
from verdict_time import CASES, load, machine, verdict, write_rows  # noqa: E402

FIGURES = ("program", "arguments", "need", "after")
DEFAULT_CASES = ("dev", "8b-prod")
TIMEOUT_S = 3600.0


def _under(python: str | None, case: str, timeout: float) -> dict:
    """One verdict of `case` under `python` (None: this interpreter), with its figures, seconds and load."""
    if python is None:
        os.environ.pop(COMPILE_PYTHON_ENV, None)
    else:
        os.environ[COMPILE_PYTHON_ENV] = python
    front = front_end()
    target = CASES[case]()
    before = load()
    result: CompileResult = run_verdict(target, timeout=timeout, progress=sys.stderr)
    after = load()
    assigned = dict(result.assigned or {})
    print(f"# {case} under jax {front.jax}: {verdict(result)}, kernels {result.kernels}, {result.seconds:.0f} s",
          file=sys.stderr, flush=True)
    return {"jax": front.jax, "python": front.python, "verdict": verdict(result), "kernels": result.kernels,
            "error_code": result.error_code, "figures": {name: assigned.get(name) for name in FIGURES},
            "seconds": round(result.seconds, 1), "load": [round(before, 1), round(after, 1)],
            "libtpu": result.libtpu, "shape": f"{target.slices} x {result.topology}", "reason": result.reason}


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.3f}"


def difference(ours: int | None, theirs: int | None) -> str:
    """theirs - ours in GiB and as a share of ours; "-" when either compile did not state the figure."""
    if ours is None or theirs is None:
        return "-"
    share = f" ({(theirs - ours) / ours:+.2%})" if ours else ""
    return f"{(theirs - ours) / GIB:+.3f}{share}"


def answer(side: dict) -> str:
    """XLA's answer without its figures (they have lines of their own): fits or the refusal's code, and the
    kernels' verdict."""
    step = "fits" if side["verdict"].startswith("fits") else side["error_code"] or side["verdict"]
    return f"{step}; kernels {side['kernels']}"


def table(rows: list[dict]) -> list[str]:
    """The markdown table: one line per case and figure XLA stated, then the verdicts; a case's seconds and load
    (this jax / the other) on its first line."""
    if not rows:
        return []
    mine, other = rows[0]["here"]["jax"], rows[0]["other"]["jax"]
    lines = [f"| case | figure (GiB per device) | jax {mine} | jax {other} | difference | seconds | load |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        here, there = row["here"], row["other"]
        timing = [f"{here['seconds']:.0f} / {there['seconds']:.0f}",
                  f"{here['load'][0]}-{here['load'][1]} / {there['load'][0]}-{there['load'][1]}"]
        cells = [[name, _gib(here["figures"][name]), _gib(there["figures"][name]),
                  difference(here["figures"][name], there["figures"][name])]
                 for name in FIGURES if (here["figures"][name], there["figures"][name]) != (None, None)]
        same = "same" if answer(here) == answer(there) else "DIFFERS"
        cells.append(["verdict", answer(here), answer(there), same])
        for index, cell in enumerate(cells):
            lines.append("| " + " | ".join([row["case"], *cell, *(timing if index == 0 else ["", ""])]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other-python", required=True,
                        help="the interpreter with the other jax (run as TPU_MULTISLICE_COMPILE_PYTHON)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), metavar="CASE",
                        help="only this case (repeatable; benchmarks/verdict_time.py's cases)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per compile")
    parser.add_argument("--json", dest="json_path", help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    os.environ.pop(COMPILE_PYTHON_ENV, None)
    here = front_end()
    os.environ[COMPILE_PYTHON_ENV] = args.other_python
    try:
        other = front_end()
    except CompilePythonError as error:
        print(f"front_end_difference: {error}", file=sys.stderr)
        return 2
    print(f"# front-end difference: {machine()}; libtpu {loaded_libtpu()} for both", flush=True)
    print(f"# {here.describe()} against {other.describe()}", flush=True)
    shapes = []
    rows = []
    for case in args.case or DEFAULT_CASES:
        row = {"case": case, "here": _under(None, case, args.timeout),
               "other": _under(args.other_python, case, args.timeout)}
        row["shape"] = row["here"]["shape"]
        rows.append(row)
        shapes.append(f"{case} {row['shape']}")
    print(f"# shapes: {', '.join(shapes)}")
    os.environ.pop(COMPILE_PYTHON_ENV, None)
    print("\n".join(table(rows)))
    if args.json_path:
        write_rows(Path(args.json_path), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
