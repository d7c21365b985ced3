"""A rerun answered by the finished job of the same configuration and data (orchestrator/commands/job.py,
``answer_finished``): every output says so (the lines, --json, JUnit, the summary, the certificate), counts 0 labels
bought now and names the job that answered; the tracking store named now gets the job's run when it lacks it."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from junitparser import JUnitXml

from certsel import cli

pytestmark = pytest.mark.integration


def _job(tmp_path):
    rng = np.random.default_rng(2)
    rows = {"candidate": ["good"] * 300 + ["bad"] * 300, "item": list(range(300)) * 2,
            "loss": (rng.random(300) < 0.02).astype(float).tolist() + (rng.random(300) < 0.5).astype(float).tolist()}
    pq.write_table(pa.table(rows), tmp_path / "t.parquet")
    job = tmp_path / "gate.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.2\npolicy: {{kind: r-eval}}\n"
                   f"budget: {{n: 100}}\nstate: {{dir: {tmp_path / 'jobs'}}}\n")
    return job


def test_a_gate_answered_by_its_finished_job_says_so_everywhere(tmp_path, capsys):
    job = _job(tmp_path)
    base = ["gate", str(job), "--no-tracking", "--labels", str(tmp_path / "labels.db")]
    assert cli.main([*base, "--json", str(tmp_path / "1.json")]) == 1
    first = json.loads((tmp_path / "1.json").read_text())
    assert first["answered_by"] is None
    capsys.readouterr()
    assert cli.main([*base, "--json", str(tmp_path / "2.json"), "--junit", str(tmp_path / "2.xml"),
                     "--summary", str(tmp_path / "2.md"), "--quiet"]) == 1
    out = capsys.readouterr().out
    second = json.loads((tmp_path / "2.json").read_text())
    assert second["answered_by"] == first["job_id"] and second["exit_code"] == 1
    for a, b in zip(first["candidates"], second["candidates"], strict=True):
        assert (b["labels"], b["reused"]) == (0, 0)  # nothing bought now
        assert b["earlier_labels"] == a["labels"] and b["earlier_job"] == first["job_id"]
        assert (b["outcome"], b["e_value"], b["bound"]) == (a["outcome"], a["e_value"], a["bound"])
    assert f"answered by the finished job {first['job_id']}" in out
    assert f"0 labels now, {first['candidates'][0]['labels']} in 1 earlier run" in out
    (suite,) = list(JUnitXml.fromfile(str(tmp_path / "2.xml")))
    assert {p.name: p.value for p in suite.properties()}["answered_by"] == first["job_id"]
    assert f"Answered by the finished job {first['job_id']}" in (tmp_path / "2.md").read_text()


def test_a_rerun_into_another_tracking_store_is_logged_there(tmp_path, capsys):
    """A job finished without tracking, then run again by the CLI with a tracking store: the store gets the finished
    job's run (its certificate readable by certsel show), once; the answer buys nothing."""
    from mlflow.tracking import MlflowClient

    job = _job(tmp_path)
    home = ["--home", str(tmp_path / "home")]
    assert cli.main(["run", str(job), "--no-tracking", "--set", "procedure=gate", *home]) == 0
    capsys.readouterr()
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    for _ in range(2):
        assert cli.main(["run", str(job), "--set", "procedure=gate", "--set", f"tracking.uri={uri}",
                         "--quiet", *home]) == 0
    out = capsys.readouterr().out
    assert "already finished with this configuration and data: its certificate, no label bought now; its MLflow " \
           f"run logged now to {uri}" in out
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, "tags.`certsel.kind` = 'job'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # logged once, found the second time
    children = client.search_runs(exps, "tags.`certsel.kind` = 'candidate'")
    assert sorted(r.data.tags["candidate"] for r in children) == ["bad", "good"]
    assert cli.main(["show", runs[0].info.run_id, "--tracking-uri", uri, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["job_id"] == runs[0].data.tags["certsel.job_id"]
