"""lm-evaluation-harness logs as certsel tables (``certsel lm-eval-table``): real ``lm_eval``
runs (a local task, the stand-in server) paired by document, certified through Ray and
MLflow, and every mistake a one-line error with exit status 2."""

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from certsel.orchestrator.inputs.lm_eval_logs import lm_eval_table
from helpers.lm_eval_runs import run_lm_eval, write_additions_task
from helpers.servers import adder_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """lm_eval runs of the stand-in's exact and weak models (200 additions), and a run of
    exact limited to the first 50 documents."""
    root = tmp_path_factory.mktemp("lm_eval")
    tasks = write_additions_task(root / "tasks")
    with adder_server() as (url, _):
        return {"exact": run_lm_eval(url, "exact", tasks, root / "exact"),
                "weak": run_lm_eval(url, "weak", tasks, root / "weak"),
                "short": run_lm_eval(url, "exact", tasks, root / "short", limit=50), "root": root}


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "certsel.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def test_runs_are_paired_by_document(runs):
    table, info = lm_eval_table({"exact": runs["exact"], "weak": runs["weak"]}, "additions", reference="exact")
    assert info["metric"] == "exact_match" and info["higher_is_better"] and info["documents"] == 200
    t = table.to_pandas()
    exact, weak = (t[t.candidate == m].set_index("item") for m in ("exact", "weak"))
    assert exact.score.eq(1.0).all()  # the stand-in's exact model is right on every addition
    # weak is off by one exactly when a*b is a multiple of 7: recompute that from the logged documents
    sample = next(runs["weak"].rglob("samples_additions_*.jsonl"))
    for line in sample.read_text().splitlines():
        row = json.loads(line)
        a, b = (int(x) for x in row["doc"]["question"][8:-1].split(" + "))
        assert weak.score[row["doc_id"]] == (0.0 if (a * b) % 7 == 0 else 1.0)
    assert np.allclose(t.loss, 1 - t.score) and np.allclose(t.loss_drop, np.maximum(t.score_reference - t.score, 0))
    assert list(t.drop_duplicates("candidate")["rank"]) == [0, 1]


def test_a_job_certifies_from_the_logs(runs, tmp_path, ray_session):
    from certsel.config import parse_config
    from certsel.orchestrator.commands.job import execute

    out = _cli("lm-eval-table", "--run", f"exact={runs['exact']}", "--run", f"weak={runs['weak']}", "--task",
               "additions", "--reference", "exact", "--out", tmp_path / "additions.parquet")
    assert out.returncode == 0, out.stderr
    assert "2 runs x 200 documents of 'additions', metric 'exact_match'" in out.stdout
    weak_risk = pq.read_table(tmp_path / "additions.parquet").to_pandas().query("candidate == 'weak'").loss.mean()
    assert 0.15 < weak_risk < 0.4
    cfg = parse_config({"name": "from-lm-eval", "data": {"path": str(tmp_path / "additions.parquet"), "human": "loss",
                                                          "order": "rank"},
                        "policy": {"kind": "r-eval"}, "procedure": "fst", "alpha": 0.1, "delta": 0.1,
                        "budget": {"n": 150, "batch": 25}, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
                        "state": {"dir": str(tmp_path / "jobs")}})
    result, run_id = execute(cfg, output=tmp_path / "out")
    assert result.certified == ["exact"] and result.selected == "exact"
    cert = json.loads((tmp_path / "out" / "selection.json").read_text())
    assert cert["candidates"][1]["status"] != "certified" and cert["data"]["items"] == 200
    # the recovery of weak against exact (about 0.73) is certified >= 0.5 from the same table
    rec = parse_config({"name": "recovery-from-lm-eval", "data": {"path": str(tmp_path / "additions.parquet"),
                                                                   "score": "score", "reference": "score_reference",
                                                                   "order": "rank"},
                        "recovery": {"at_least": 0.5, "reference_name": "exact"}, "policy": {"kind": "r-eval"},
                        "procedure": "fst", "delta": 0.1, "budget": {"n": 150, "batch": 25},
                        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")}})
    result, _ = execute(rec, output=tmp_path / "rec")
    assert result.certified == ["exact", "weak"]


def test_mistakes_are_one_line_errors_with_exit_status_2(runs, tmp_path):
    # logs that do not cover the same documents (lm_eval --limit takes the first 50)
    out = _cli("lm-eval-table", "--run", f"exact={runs['exact']}", "--run", f"short={runs['short']}", "--task",
               "additions", "--out", tmp_path / "t.parquet")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "runs 'exact' and 'short' do not cover the same documents ('short' lacks 150: 50, 51, 52, 53, 54" in out.stderr
    out = _cli("lm-eval-table", "--run", f"exact={runs['exact']}", "--task", "gsm8k", "--out", tmp_path / "t.parquet")
    assert out.returncode == 2 and "run 'exact': no task 'gsm8k' in its logs (has additions)" in out.stderr
    out = _cli("lm-eval-table", "--run", f"exact={runs['exact']}", "--task", "additions", "--metric", "acc", "--out",
               tmp_path / "t.parquet")
    assert out.returncode == 2 and "has no metric 'acc' with a direction" in out.stderr
    # a metric outside [0, 1], and one without a direction: edited copies of a real log
    bad = tmp_path / "bad"
    for src in runs["weak"].rglob("*"):
        if src.is_file():
            dst = bad / src.relative_to(runs["weak"])
            dst.parent.mkdir(parents=True, exist_ok=True)
            text = src.read_text()
            if src.name.startswith("samples_"):
                text = text.replace('"exact_match": 1.0}', '"exact_match": 3.0}', 1)
            dst.write_text(text)
    out = _cli("lm-eval-table", "--run", f"bad={bad}", "--task", "additions", "--out", tmp_path / "t.parquet")
    assert out.returncode == 2 and "metric 'exact_match' has values outside [0, 1] (run 'bad': min 0, max 3)" in out.stderr
    res = next(bad.rglob("results_*.json"))
    doc = json.loads(res.read_text())
    doc["higher_is_better"] = {}
    res.write_text(json.dumps(doc))
    out = _cli("lm-eval-table", "--run", f"bad={bad}", "--task", "additions", "--out", tmp_path / "t.parquet")
    assert out.returncode == 2 and "task 'additions' has metrics (none recorded): choose one with --metric" in out.stderr
    assert not (tmp_path / "t.parquet").exists()
    out = _cli("lm-eval-table", "--run", "exact", "--task", "additions", "--out", tmp_path / "t.parquet")
    assert out.returncode == 2 and "--run 'exact' is not NAME=FOLDER" in out.stderr
