"""docs/results.md is written by the benchmarks that measure it (benchmarks/results_doc.py),
and the README quotes it instead of typing figures: every section names the command that
wrote it, the date and the machine; rerunning a command rewrites its section only; a figure
the README shows is the one in the section it links to."""

import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_doc import END, START, WRITTEN, write_section  # noqa: E402

RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- section: (?P<key>[\w-]+) -->\n(?P<body>.*?)<!-- end: (?P=key) -->\n", re.S)
# a measured figure: a time, a count of tests or labels, a rate (a target such as "at most 30%" is not one)
FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:s|ms|min|minutes|seconds|tests?|labels?|x)\b|(?<!at most )(?<!at least )"
                    r"\b\d[\d.]*\s?%")


def slug(title: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def sections(text: str) -> dict[str, dict]:
    out = {}
    for m in BLOCK.finditer(text):
        body = m.group("body")
        title = re.match(r"## (.+)\n", body)
        written = WRITTEN.search(body)
        out[m.group("key")] = {"title": title and title.group(1), "body": body, "written": written}
    return out


@pytest.mark.unit
def test_every_section_names_the_command_that_wrote_it_and_that_command_writes_it():
    text = RESULTS.read_text()
    found = sections(text)
    assert found, "docs/results.md has no section written by a benchmark"
    outside = BLOCK.sub("", text)
    assert not re.search(r"^## ", outside, re.M), "a section of docs/results.md that no benchmark writes"
    for key, sec in found.items():
        assert sec["title"], f"section {key}: no title"
        w = sec["written"]
        assert w is not None, f"section {key}: no 'Written by ... on DATE, MACHINE' line"
        script = re.match(r"python (benchmarks/\w+\.py)\b", w.group("command"))
        assert script, f"section {key}: {w.group('command')!r} is not a benchmark's command"
        source = (ROOT / script.group(1)).read_text()
        assert "results_section(" in source and f'"{key}"' in source, f"{script.group(1)} does not write {key!r}"
        assert "--docs" in w.group("command"), f"section {key}: the command that rewrites it needs --docs"


@pytest.mark.unit
def test_rewriting_a_section_replaces_it_and_leaves_the_others(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Measured results\n\nIntro.\n")
    write_section("a", "First", "| x |\n|---|\n| 1 |\n", "python benchmarks/a.py --docs", path=page)
    write_section("b", "Second", "two\n", "python benchmarks/b.py --docs", path=page)
    write_section("a", "First", "| x |\n|---|\n| 2 |\n", "python benchmarks/a.py --docs", path=page)
    text = page.read_text()
    assert text.count(START.format(key="a")) == 1 and text.count(END.format(key="a")) == 1
    got = sections(text)
    assert list(got) == ["a", "b"] and "| 2 |" in got["a"]["body"] and "| 1 |" not in text
    assert got["b"]["body"].rstrip().endswith("two") and text.startswith("# Measured results\n\nIntro.\n")
    assert got["a"]["written"].group("command") == "python benchmarks/a.py --docs"


def _readme_parts():
    text = README.read_text()
    by_slug = {slug(s["title"]): (k, s) for k, s in sections(RESULTS.read_text()).items()}
    return text, by_slug


@pytest.mark.unit
def test_the_readme_links_only_sections_that_exist_with_the_figures_they_hold():
    text, by_slug = _readme_parts()
    links = re.findall(r"\[([^\]]*)\]\(docs/results\.md(?:#([\w-]+))?\)", text)
    assert links, "the README links no measured figure"
    for words, anchor in links:
        if anchor:
            assert anchor in by_slug, f"README links docs/results.md#{anchor}, which no section has"
        for number in re.findall(r"\d[\d,.]*\d|\d", words):
            body = by_slug[anchor][1]["body"] if anchor else RESULTS.read_text()
            assert number in body, f"README's {number!r} ({words!r}) is not in docs/results.md#{anchor}"
    # an answer the README shows is the one the benchmark printed, line by line
    blocks = re.findall(r"<!-- output: ([\w-]+) -->\n```\n(.*?)```", text, re.S)
    assert blocks, "the README shows no answer from docs/results.md"
    for key, block in blocks:
        body = sections(RESULTS.read_text())[key]["body"]
        for line in block.splitlines():
            assert line.strip() in body, f"README's output line is not the one in docs/results.md ({key}): {line!r}"


@pytest.mark.unit
def test_the_readme_types_no_measured_figure_of_its_own():
    text = README.read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # commands and answers (checked above)
    prose = re.sub(r"\[[^\]]*\]\(docs/results\.md[^)]*\)", "", prose)
    prose = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", prose)  # image captions
    found = [m.group(0) for m in FIGURE.finditer(prose)]
    assert not found, f"figures typed into the README (link them to docs/results.md instead): {found}"
    assert len(text.splitlines()) <= 250, "the README explains; reference material goes to docs/"
