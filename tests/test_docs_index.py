"""docs/ has a way in: docs/README.md lists every page in a reading order, and each page opens
by saying who it is for."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.unit
def test_the_index_lists_every_page_and_each_page_says_who_it_is_for():
    index = (DOCS / "README.md").read_text()
    listed = re.findall(r"^\| \[[\w.]+\]\(([\w.]+\.md)\) \| ([^|]+) \|", index, re.M)
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert {name for name, _ in listed} == pages, "docs/README.md must list every page of docs/"
    for name, who in listed:
        lines = (DOCS / name).read_text().splitlines()
        assert lines[0].startswith("# ") and lines[2] == f"*For {who.strip()}.*", f"{name} does not open with its reader"
