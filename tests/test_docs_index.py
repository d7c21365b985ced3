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


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    out, seen, fenced = set(), {}, False
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.*)$", line)):
            s = _slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")  # GitHub numbers a repeated heading
            seen[s] = seen.get(s, 0) + 1
    return out | set(re.findall(r'<a (?:id|name)="([^"]+)"', text))


@pytest.mark.unit
def test_every_anchor_a_page_links_to_exists():
    """Links such as [x](statistics.md#recovery) in README.md and docs/: the page exists and has that heading."""
    broken = []
    for page in [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            dest = page if not target else page.parent / target
            if not dest.is_file() or anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, f"broken anchors: {broken}"
