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


def _pin(requirements: str, package: str) -> str:
    import re
    found = re.search(rf"^{re.escape(package)}(?:\[[^\]]*\])?==([\w.]+)", (REPO / requirements).read_text(), re.M)
    assert found, f"{package} is not pinned in {requirements}"
    return found.group(1)


def test_tool_versions_the_deploy_guide_quotes_are_the_pins():
    """The Pulumi SDK and Ray versions the deploy guide's tool table names are the ones requirements pin, and the
    Ray CLI's is the cluster image's (rayImage's default tag)."""
    from infra.config.schema import KEYS_BY_NAME
    tools = (REPO / "docs" / "deploying.md").read_text().split("## 1. Tools", 1)[1].split("\n## ", 1)[0]
    pulumi_row = next(line for line in tools.splitlines() if line.startswith("| Pulumi CLI"))
    ray_row = next(line for line in tools.splitlines() if line.startswith("| Ray CLI"))
    assert f"({_pin('requirements.txt', 'pulumi')})" in pulumi_row
    ray = _pin("requirements-trainer.txt", "ray")
    assert f"| {ray}, the cluster's Ray" in ray_row
    assert KEYS_BY_NAME["rayImage"].default.startswith(f"rayproject/ray:{ray}-")
