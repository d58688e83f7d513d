"""The docs' table of what an interruption costs per committed stack, computed from the config (core/preemption.py,
core/interruptions.py), so docs/costs.md cannot drift from the code.

    python -m preview.interruption_table            # print the table
    python -m preview.interruption_table --write    # rewrite it in docs/costs.md

The table sits under the marker line `<!-- table:interruption-costs ... -->` and ends at the next blank line;
tests/preview/test_interruption_table.py fails when the file's table differs from this one.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = "docs/costs.md"
MARKER = re.compile(r"^<!-- table:interruption-costs\b.*-->$", re.MULTILINE)
# Committed stacks, plus prod on Spot: the case where the node pools raise their shutdown budget.
ROWS: tuple[tuple[str, dict[str, str]], ...] = (
    ("dev", {}), ("prod", {}), ("prod", {"capacity": "spot"}), ("jobset", {}), ("pathways", {}),
)


def _cell(minutes: float | None) -> str:
    return "–" if minutes is None else f"{minutes:,.0f}"


def table(repo: Path = REPO) -> str:
    from core.interruptions import interruption_costs
    from infra.config import build
    from preview.stack_files import load_stack_config

    rows = ["| stack | chips | capacity | save at the notice / what the notice gives | Spot preemption | "
            "restart after a failure | failed smoke test |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for stack, overrides in ROWS:
        config = build({**load_stack_config(stack, repo), **overrides})
        budget = config.workload.shutdown
        smoke = config.workload.smoke_test and config.workload.backend != "pathways"
        costs = interruption_costs(budget, chips=config.tpu.total_chips, smoke_test=smoke).as_dict()
        if not budget.sees_notice:
            save = "not heard (Pathways proxy)"
        elif budget.spot:
            save = f"{budget.needed_s} s / {budget.notice_s} s" + (" (pools raised to 120 s)"
                                                                   if budget.node_shutdown_s else "")
        else:
            save = f"{budget.needed_s} s / no Spot notice"
        name = f"`{stack}`" + "".join(f" `{k}={v}`" for k, v in overrides.items())
        rows.append(f"| {name} | {costs['chips']} | {config.tpu.capacity.value} | {save} | "
                    f"{_cell(costs['preemption_chip_minutes'])} | {_cell(costs['restart_chip_minutes'])} | "
                    f"{_cell(costs['smoke_failure_chip_minutes'])} |")
    return "\n".join(rows)


def _span(text: str) -> tuple[int, int] | None:
    """Where the table sits: from the line after the marker to the next blank line or the end (no newline)."""
    match = MARKER.search(text)
    if match is None:
        return None
    start = match.end() + 1
    end = text.find("\n\n", start)
    return start, (len(text.rstrip("\n")) if end < 0 else end)


def table_in_file(repo: Path = REPO) -> str | None:
    text = (repo / DOC).read_text()
    span = _span(text)
    return None if span is None else text[span[0]:span[1]]


def write(repo: Path = REPO) -> None:
    path = repo / DOC
    text = path.read_text()
    span = _span(text)
    if span is None:
        raise SystemExit(f"{DOC} has no interruption-costs marker")
    rest = text[span[1]:] or "\n"
    path.write_text(text[:span[0]] + table(repo) + rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m preview.interruption_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    args = parser.parse_args(argv)
    if args.write:
        write()
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
