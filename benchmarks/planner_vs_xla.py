"""The planner's HBM estimate against XLA's buffer assignment, one row per compiled calibration case.

    .venv/bin/python benchmarks/planner_vs_xla.py            # markdown table on stdout
    .venv/bin/python benchmarks/planner_vs_xla.py --terms    # also each row's estimate, term by term

The XLA figures are core/xla_calibration.json (`python -m preview.compile --calibrate`: MaxText 0.2.5's own AOT
compile of the exact step for the real TPU target, run on CPU; each row names the jax/libtpu pair that compiled
it). Nothing is compiled here: the estimate (core/memory.py through core/planner.py) is recomputed from the
row's settings and set against it.

Columns:
  XLA peak     libtpu's "Total hbm usage" after XLA's own rematerialization (what it assigned), or, when the step
               did not fit, "Used X of Y hbm" (what it said it needed); like the estimate, with the runtime's
               reservation (preview/compile/calibration.py row_need);
  XLA need     the step's bytes before XLA recomputed anything ("rematerialization hbm reduction: X => Y"), else
               the peak;
  state        where the row's train-state bytes (XLA's "arguments") come from: xla (libtpu stated them), planner
               (a memory-only compile that stopped before XLA's rematerialization pass, the only place it prints
               them: the planner's params + optimizer stand in, equal to libtpu's to 1 % wherever both exist),
               refused (XLA refused the step and stated one figure);
  set          fitted (the terms were chosen on it), margin (ESTIMATE_ERROR was set from it), sets CONSTANT
               (that constant of core/memory.py was set from it) or held out (compiled after the model was
               frozen, in a shape chosen after it, setting nothing: it measures the error);
  est/need     the planner's bytes per device over XLA's need; est/peak likewise over the peak;
  near         XLA's peak is at least 75 % of the limit XLA compiles against (where the planner's verdict
               matters; below it XLA spends spare HBM on its schedule and an upper bound is fine);
  XLA, planner what the compiler did (fits / recomputed / refused) and what the planner says;
  agree        both accept the step or both refuse it (the planner's "near the limit" accepts, with a warning).
An XLA need marked "*" is not measured by XLA alone: XLA's program bytes plus the planner's own train state
(state "planner").
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.memory import ESTIMATE_ERROR, GIB, TIED_HEAD_MULTISLICE_ERROR  # noqa: E402
from core.planner import PlanRequest, plan  # noqa: E402
from preview.compile.calibration import (CONSTANT_ROWS, HELD_OUT, MARGIN_ROWS, arguments_source, fill_limits, row_need,  # noqa: E402
                                 row_peak)

NEAR_LIMIT = 0.75


def request_of(row: dict, memory_check: bool = False) -> PlanRequest:
    return PlanRequest(
        model=row["model"], generation=row["generation"], topology=row["topology"], slices=row["slices"],
        ici_fsdp=row["ici_fsdp"], ici_tensor=row["ici_tensor"], dcn_data=row["dcn_data"], dcn_fsdp=row["dcn_fsdp"],
        per_device_batch_size=row["per_device_batch_size"], max_target_length=row["max_target_length"],
        remat_policy=row["remat_policy"], remat_offload=tuple(row["remat_offload"]), weight_dtype=row["weight_dtype"],
        attention=row["attention"], memory_check=memory_check)


def near_limit(row: dict, data: dict) -> bool:
    return row_peak(row, data) >= NEAR_LIMIT * row["hbm_bytes"]


def xla_verdict(row: dict) -> str:
    if not row["compiled"]:
        return "refused"
    return "recomputed" if row["before_remat_bytes"] else "fits"


def planner_verdict(row: dict) -> str:
    from core.errors import PlanError
    try:
        return plan(request_of(row, memory_check=True)).memory.verdict
    except PlanError as err:
        return "host memory" if "Host memory:" in str(err) else "does not fit"


def agree(xla: str, planner: str) -> bool:
    """Both verdicts accept the step, or both refuse it."""
    return (xla == "refused") == (planner in ("does not fit", "host memory"))


def rows(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    fill_limits(data["rows"], data["hbm"])
    out = []
    for row in data["rows"]:
        memory = plan(request_of(row)).memory
        need, peak = row_need(row, data), row_peak(row, data)
        out.append({"row": row, "memory": memory, "need": need, "peak": peak, "est_need": memory.total / need,
                    "est_peak": memory.total / peak, "near": near_limit(row, data),
                    "xla": xla_verdict(row), "planner": planner_verdict(row), "state": arguments_source(row),
                    "held_out": row["case"] in HELD_OUT, "margin": row["case"] in MARGIN_ROWS,
                    "sets": next((name for name, cases in CONSTANT_ROWS.items()
                                  if row["case"] in cases and name != "ESTIMATE_ERROR"), "")})
    return out


def shape(row: dict) -> str:
    layout = f"{row['slices']}x{row['generation']}-{row['topology']}"
    mesh = f"f{row['ici_fsdp']}" + (f"t{row['ici_tensor']}" if row["ici_tensor"] > 1 else "")
    if row["slices"] > 1:
        mesh += f" dcn d{row['dcn_data']}f{row['dcn_fsdp']}"
    remat = row["remat_policy"] + ("+off" if row["remat_offload"] else "")
    return (f"{row['model']} {layout} {mesh} b{row['per_device_batch_size']:g}x{row['max_target_length']} "
            f"{remat} {'fp32' if row['weight_dtype'] == 'float32' else 'bf16'}")


def set_label(r: dict) -> str:
    """The row's part in the model: held out (measures it), margin (set ESTIMATE_ERROR), sets CONSTANT, fitted."""
    if r["held_out"]:
        return "held out"
    return "margin" if r["margin"] else f"sets {r['sets']}" if r["sets"] else "fitted"


def table(results: list[dict], terms: bool = False) -> str:
    lines = ["| case | shape | XLA peak GiB | XLA need GiB | estimate GiB | est/need | est/peak | near | XLA | planner "
             "| agree | state | set | jax / libtpu |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        row, memory = r["row"], r["memory"]
        measured = "" if r["state"] != "planner" else "*"
        lines.append(
            f"| {row['case']} | {shape(row)} | {r['peak'] / GIB:.2f}{measured} | {r['need'] / GIB:.2f}{measured} | "
            f"{memory.total / GIB:.2f} | {r['est_need']:.2f} | {r['est_peak']:.2f} | {'yes' if r['near'] else ''} | "
            f"{r['xla']} | {r['planner']} | {'yes' if agree(r['xla'], r['planner']) else 'NO'} | "
            f"{r['state']} | {set_label(r)} | "
            f"{row['jax']} / {row['libtpu']}"
            f"{' (memory only)' if row.get('memory_only') else ''} |")
        if terms:
            lines.append(f"|  | {' + '.join(f'{n} {v / GIB:.2f}' for n, v in memory.terms())} | | | | | | | | | | | | |")
    near = [r for r in results if r["near"] and r["xla"] != "refused" and set_label(r) == "fitted"]
    margin = [r for r in results if r["margin"] and r["xla"] != "refused"]
    held = [r for r in results if r["held_out"] and r["xla"] != "refused"]
    lines.append("")
    for source in ("xla", "planner", "refused"):
        cases = [r["row"]["case"] for r in results if r["state"] == source]
        lines.append(f"train state from {source} ({len(cases)}): {', '.join(cases) or 'none'}")
    lines.append(f"rows: {len(results)}; compiled near the limit (XLA peak >= {NEAR_LIMIT:.0%}): {len(near)}")
    if near:
        lines.append(f"near the limit: est/need {min(r['est_need'] for r in near):.2f}-"
                     f"{max(r['est_need'] for r in near):.2f}, est/peak {min(r['est_peak'] for r in near):.2f}-"
                     f"{max(r['est_peak'] for r in near):.2f}")
    lines.append(f"everywhere: est/need >= {min(r['est_need'] for r in results):.2f}, est/peak >= "
                 f"{min(r['est_peak'] for r in results):.2f}; the planner's stated error: {ESTIMATE_ERROR:.0%}")
    if near:
        loo = []
        for r in near:
            others = max(abs(o["est_need"] - 1) for o in near if o is not r)
            if abs(r["est_need"] - 1) > others:
                loo.append(f"{r['row']['case']} {r['est_need'] - 1:+.1%} (others {others:.1%})")
        lines.append(f"leave-one-out, fitted rows compiled near the limit: worst {max(abs(r['est_need'] - 1) for r in near):.1%}"
                     f"; not covered by the others' margin: {', '.join(loo) or 'none'}")
    if margin:
        lines.append("margin rows (ESTIMATE_ERROR set from them): " + ", ".join(
            f"{r['row']['case']} {r['est_need'] - 1:+.1%}" for r in margin))
    for constant, cases in CONSTANT_ROWS.items():
        lines.append(f"rows that set {constant}: {', '.join(cases)}"
                     + (" (and the fitted rows near the limit, each left out)" if constant == "ESTIMATE_ERROR" else ""))
    held_all = [r for r in results if r["held_out"]]
    if held_all:
        lines.append("held out (compiled after the model was frozen; need from XLA only unless marked *): " + ", ".join(
            f"{r['row']['case']} {r['est_need'] - 1:+.1%}{'*' if r['state'] == 'planner' else ''} "
            f"({r['xla']}, planner {r['planner']})" for r in held_all))
        lines.append(f"held out, worst error where XLA compiled: "
                     f"{max(abs(r['est_need'] - 1) for r in held) if held else 0:.1%} (the stated margin: "
                     f"{ESTIMATE_ERROR:.0%}; a tied head on more than one slice: "
                     f"{TIED_HEAD_MULTISLICE_ERROR:.0%}, set from the rows named above, none held out)")
    wrong = [r["row"]["case"] for r in results if r["xla"] == "refused" and r["planner"] != "does not fit"]
    lines.append(f"accepted by the planner but refused by XLA: {', '.join(wrong) or 'none'}")
    refused_fits = [r["row"]["case"] for r in results if r["xla"] != "refused" and r["planner"] == "does not fit"]
    host = [r["row"]["case"] for r in results if r["planner"] == "host memory"]
    lines.append(f"refused by the planner for the host's memory (offloaded activations), not HBM: "
                 f"{', '.join(host) or 'none'}")
    lines.append(f"refused by the planner but compiled by XLA: {', '.join(refused_fits) or 'none'}")
    lines.append(f"verdicts agree on {sum(agree(r['xla'], r['planner']) for r in results)} of {len(results)} rows")
    table_rows = [line for line in lines if line.startswith("|")]
    summary = [textwrap.fill(line, 100, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
               for line in lines if not line.startswith("|")]
    return "\n".join(table_rows + summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "core" / "xla_calibration.json")
    parser.add_argument("--terms", action="store_true", help="each estimate term by term")
    args = parser.parse_args(argv)
    print(table(rows(args.data), args.terms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
