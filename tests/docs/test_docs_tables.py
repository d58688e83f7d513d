"""Numbers and names the docs quote that the code computes (prices, `pulumi up` durations, the APIs, the deployer's
roles) are the code's own: each table under a `<!-- table:NAME -->` marker equals what preview/docs_tables.py
builds now. A price, a timing or a role changed in code without the docs fails here."""
from __future__ import annotations

import pytest

from preview import docs_tables
from tests.conftest import REPO


@pytest.mark.parametrize("name", sorted(docs_tables.TABLES))
def test_table_in_the_docs_is_what_the_code_computes(name):
    file, builder = docs_tables.TABLES[name]
    current = docs_tables.table_in_file(name, REPO)
    assert current is not None, f"{file} has no <!-- table:{name} --> marker"
    assert current == builder(REPO), f"{file}: table {name} is stale; run .venv/bin/python -m preview.docs_tables --write"


def test_a_drifted_number_is_caught(tmp_path):
    """The check reads the file: a price edited by hand in a copy of the docs no longer matches."""
    (tmp_path / "docs").mkdir()
    for name in ("README.md", "docs/costs.md", "docs/deploying.md"):
        (tmp_path / name).write_text((REPO / name).read_text())
    readme = tmp_path / "README.md"
    table = docs_tables.table_in_file("costs-at-a-glance", tmp_path)
    readme.write_text(readme.read_text().replace(table, table.replace("|", "| 1", 1)))
    assert docs_tables.table_in_file("costs-at-a-glance", tmp_path) != docs_tables.costs_at_a_glance(REPO)
