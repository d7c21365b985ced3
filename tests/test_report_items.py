"""The report's per-item view (issue 72, point 9): each candidate's labels in the order bought, the same rows as
labels.parquet, the judge's loss beside each human label, sortable by a click in a real browser."""

import html.parser
import os
import pathlib
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import certsel
from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

pytestmark = pytest.mark.integration
CHROMIUM = os.environ.get("CERTSEL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Items(html.parser.HTMLParser):
    """The report's item tables: {candidate: [row cells]} (its summary's name before the colon)."""

    def __init__(self):
        super().__init__()
        self.tables, self.name, self.cell, self.in_items, self.in_summary, self.text = {}, None, None, False, False, ""

    def handle_starttag(self, tag, attrs):
        if tag == "summary":
            self.in_summary, self.text = True, ""
        elif tag == "table" and ("class", "items") in attrs:
            self.in_items = True
            self.tables[self.name] = []
        elif self.in_items and tag == "tr":
            self.tables[self.name].append([])
        elif self.in_items and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "summary":
            self.in_summary, self.name = False, self.text.split(":")[0]
        elif tag == "table":
            self.in_items = False
        elif self.in_items and tag in ("td", "th"):
            self.tables[self.name][-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.in_summary:
            self.text += data
        if self.cell is not None:
            self.cell += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quantization.yaml"
    res = certsel.run(str(example), output=out, track=False, budget={"n": 40})
    return res, out


def test_each_candidates_labels_are_its_rows_in_labels_parquet_with_the_judges_loss(report):
    res, out = report
    parser = Items()
    parser.feed((out / "report.html").read_text())
    labels = pq.read_table(out / "labels.parquet").to_pandas()
    table = load_loss_table(DEFAULT_TABLE, judge="loss_judge_best")
    names = list(table.candidates)
    assert set(parser.tables) == set(labels["candidate"])
    for name, rows in parser.tables.items():
        head, body = rows[0], rows[1:]
        assert head == ["order bought", "item", "role", "loss", "judge's loss on it"]
        mine = labels[labels["candidate"] == name]
        assert [r[0] for r in body] == [str(s + 1) for s in mine["seq"]]
        assert [r[1] for r in body] == [str(i) for i in mine["item_id"]]
        assert [r[2] for r in body] == list(mine["role"])
        np.testing.assert_allclose([float(r[3]) for r in body], mine["loss"], rtol=1e-3, atol=1e-4)
        k = names.index(name)
        human = mine["role"].to_numpy() == "human"
        judged = [float(r[4]) for r, h in zip(body, human) if h]
        np.testing.assert_allclose(judged, table.judge[k, mine["item"].to_numpy()[human]], rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine")
def test_a_click_on_a_heading_sorts_a_candidates_items_in_a_browser(report):
    from playwright.sync_api import sync_playwright

    _, out = report
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((out / "report.html").as_uri())
        first = page.locator("details").first
        first.locator("summary").click()
        cells = first.locator("table.items tr td:nth-child(4)")
        before = [float(x) for x in cells.all_inner_texts()]
        head = first.locator("table.items th").nth(3)
        head.click()
        assert [float(x) for x in cells.all_inner_texts()] == sorted(before)
        head.click()
        assert [float(x) for x in cells.all_inner_texts()] == sorted(before, reverse=True)
        first.locator("table.items th").nth(0).click()  # back to the order bought
        order = [int(x) for x in first.locator("table.items tr td:nth-child(1)").all_inner_texts()]
        assert order == sorted(order)
        browser.close()
