"""docs/costs.md's interruption table is what the code computes now (preview/interruption_table.py)."""
from __future__ import annotations

from preview import docs_tables, interruption_table


def test_the_docs_table_matches_the_code():
    assert docs_tables.table_in_file("interruption-costs") == interruption_table.table(), (
        "docs/costs.md's interruption table is stale: python -m preview.docs_tables --write")


def test_the_table_has_a_row_per_case_and_prices_what_applies():
    rows = interruption_table.table().splitlines()[2:]
    assert len(rows) == len(interruption_table.ROWS)
    cells = {row.split(" | ")[0].strip("| "): row.split(" | ") for row in rows}
    assert cells["`dev`"][4] != "–"                          # Spot: a preemption is priced
    assert cells["`prod`"][4] == "–"                         # on-demand: no Spot notice
    assert cells["`pathways`"][6].rstrip(" |") == "–"        # no smoke test on Pathways
    assert "pools raised to 120 s" in cells["`prod` `capacity=spot`"][3]
