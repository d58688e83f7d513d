"""Each reference page under docs/ starts with a contents list that links every section (## and ###) in order, so a
section added to a page shows up where a reader looks first."""
from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

# docs/platform-notes.md is numbered notes the code cites by §, not a reference page.
PAGES = sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "platform-notes.md")
HEADING = re.compile(r"^(#{2,3}) (.+)$")
ENTRY = re.compile(r"^\s*- \[.*?\]\(#([^)]*)\)$")


def anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(text: str) -> list[str]:
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(anchor(match.group(2)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_starts_with_a_contents_list_of_its_sections(page):
    text = page.read_text()
    before_first_section = text.split("\n## ", 1)[0]
    assert "Contents" in before_first_section, f"{page.name} has no contents list before its first section"
    listed = [m.group(1) for line in before_first_section.splitlines() if (m := ENTRY.match(line))]
    assert listed == sections(text), f"{page.name}: the contents list and the sections differ"


def test_anchor_follows_github():
    assert anchor("JobSet + Kueue (`workloadBackend: jobset`, stack `jobset`)") == \
        "jobset--kueue-workloadbackend-jobset-stack-jobset"
    assert anchor("5. `pulumi up` and how long it takes") == "5-pulumi-up-and-how-long-it-takes"


def test_the_readme_links_every_page():
    readme = (REPO / "README.md").read_text()
    unlinked = [p.name for p in (REPO / "docs").glob("*.md") if f"](docs/{p.name}" not in readme]
    assert not unlinked, f"pages the README does not link: {unlinked}"
