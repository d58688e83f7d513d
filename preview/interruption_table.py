"""The docs' table of what an interruption costs per committed stack, computed from the config (core/preemption.py,
core/interruptions.py), so docs/costs.md cannot drift from the code. It is one of preview/docs_tables.py's tables
(`python -m preview.docs_tables --write` rewrites it under its marker in docs/costs.md).
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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
    from workloads.backends import backend_for

    rows = ["| stack | chips | capacity | save at the notice / what the notice gives | Spot preemption | "
            "restart after a failure | failed smoke test |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for stack, overrides in ROWS:
        config = build({**load_stack_config(stack, repo), **overrides})
        budget = config.workload.shutdown
        costs = interruption_costs(budget, chips=config.tpu.total_chips,
                                   smoke_test=backend_for(config).runs_smoke_test(config)).as_dict()
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
