"""One name per quantity (docs/glossary.md, GLOSSARY in orchestrator/outputs/cells.py): the
words in the terminal table and the report; the key in selection.json, the
CSV and to_frame(); the metric on the candidate's MLflow run; and the docs table, all from
one real job (local Ray, MLflow SQLite store)."""

import csv
import io
import json
import pathlib

import pytest
from certsel.config import load_config
from certsel.orchestrator.outputs.cells import GLOSSARY
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.selection_schema import parse
from certsel.terminal import format_job, print_job
from mlflow.tracking import MlflowClient
from rich.console import Console

from helpers.cli import job_file

pytestmark = pytest.mark.integration
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "glossary.md"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("glossary")
    cfg = load_config(job_file(tmp, procedure="bonferroni", state={"dir": str(tmp / "jobs")},
                               objective={"column": "avg_bitwidth"}))
    result, run_id = execute(cfg, output=tmp / "out")
    return result, run_id, json.loads((tmp / "out" / "selection.json").read_text()), tmp


def test_every_output_uses_the_glossary_names(job):
    result, run_id, cert, tmp = job
    console = Console(record=True, width=400)
    print_job(console, parse(cert), quiet=False)
    terminal = console.export_text()
    report = (tmp / "out" / "report.html").read_text()
    header = next(csv.reader(io.StringIO(format_job(parse(cert), "csv"))))
    row = next(c for c in cert["candidates"] if c["certified"])
    client = MlflowClient(result.tracking["uri"])
    kid = next(r for r in client.search_runs([result.tracking["experiment_id"]],
                                             f"tags.`mlflow.parentRunId` = '{run_id}'")
               if r.data.tags["candidate"] == row["candidate"])
    docs = DOCS.read_text()
    for words, key, metric, meaning in GLOSSARY:
        assert words in terminal and words in report, words
        assert key in row and (key in header or f"{key}_low" in header), key  # CSV: an interval as its two ends
        assert metric is None or metric in kid.data.metrics, metric
        assert f"| {words} | `{key}` | {'-' if metric is None else f'`{metric}`'} | {meaning} |" in docs, words
    for old in ("joint bound", "own bound", "max E"):  # the names these replaced appear nowhere
        assert old not in terminal and old not in report
