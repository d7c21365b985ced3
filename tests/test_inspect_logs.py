"""inspect-ai logs as certsel tables (``certsel inspect-table``): real inspect runs of three
mockllm models paired by sample id, certified by a certsel job (Ray, MLflow) and audited from
the table, and every mistake a one-line error with exit status 2."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from certsel.inspect.logs import inspect_table
from certsel.inspect import CertifiedStopping
from helpers.inspect_tasks import run, task

pytestmark = pytest.mark.integration

ACCURACY = {"strong": 0.97, "medium": 0.85, "weak": 0.6}
N = 200


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Full runs of three models (one log each), a two-epoch run, an early-stopped run, a run of
    the first 50 samples only, and a run with a non-numeric score."""
    root = tmp_path_factory.mktemp("inspect")
    rng = np.random.default_rng(11)
    scores = {m: (rng.random(N) < a).astype(float) for m, a in ACCURACY.items()}
    per_sample = [{m: float(scores[m][i]) for m in ACCURACY} for i in range(N)]
    out = {"scores": scores, "root": root}
    for m in ACCURACY:
        [log] = run(task(per_sample, None, name="qa", model=f"mockllm/{m}"), root / m)
        out[m] = log.location
    twice = [[0.0, 1.0] if i % 2 else [1.0, 1.0] for i in range(N)]
    [log] = run(task(twice, None, name="twice", epochs=2), root / "epochs")
    out["epochs"] = log.location
    [log] = run(task(np.ones(N), CertifiedStopping(at_least=0.5), name="stopped"), root / "stopped")
    out["stopped"] = log.location
    [log] = run(task(np.ones(N), None, name="qa", model="mockllm/short"), root / "short", limit=50)
    out["short"] = log.location
    [log] = run(task(["maybe"] * 20, None, name="words"), root / "words")
    out["words"] = log.location
    return out


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "certsel.cli", *map(str, args)], capture_output=True, text=True)


def test_logs_are_paired_by_sample_id(logs):
    table, info = inspect_table([logs["root"] / "strong", logs["medium"], logs["weak"]])
    assert info["candidates"] == ["mockllm/strong", "mockllm/medium", "mockllm/weak"] and info["samples"] == N
    t = table.to_pandas()
    for rank, m in enumerate(ACCURACY):
        rows = t[t.candidate == f"mockllm/{m}"].sort_values("item")
        np.testing.assert_array_equal(rows["item"], np.arange(N))
        np.testing.assert_array_equal(rows.score, logs["scores"][m])  # the recorded scores, by sample id
        assert (rows["rank"] == rank).all()
    assert np.allclose(t.loss, 1 - t.score)


def test_epochs_are_averaged_per_sample(logs):
    table, info = inspect_table([logs["epochs"]])
    t = table.to_pandas().sort_values("item")
    np.testing.assert_array_equal(t.score, [0.5 if i % 2 else 1.0 for i in range(N)])
    assert info["epochs"] == [2]


def test_a_job_certifies_and_audits_from_the_table(logs, tmp_path):
    from certsel.config import parse_config
    from certsel.orchestrator.commands.audit import audit
    from certsel.orchestrator.commands.job import execute
    from certsel.orchestrator.inputs.sources import load_job_data

    out = _cli("inspect-table", logs["strong"], logs["medium"], logs["weak"], "--out", tmp_path / "qa.parquet")
    assert out.returncode == 0, out.stderr
    assert "3 candidates (mockllm/strong, mockllm/medium, mockllm/weak) x 200 samples, scorer 'recorded_score'" \
        in out.stdout
    job = {"name": "from-inspect", "data": {"path": str(tmp_path / "qa.parquet"), "human": "loss", "order": "rank"},
           "policy": {"kind": "r-eval"}, "procedure": "fst", "alpha": 0.25, "delta": 0.1,
           "budget": {"n": 150, "batch": 25}, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
           "state": {"dir": str(tmp_path / "jobs")}}
    cfg = parse_config(job)
    result, _ = execute(cfg, output=tmp_path / "out")
    assert result.certified == ["mockllm/strong", "mockllm/medium"] and result.selected == "mockllm/medium"
    assert json.loads((tmp_path / "out" / "selection.json").read_text())["data"]["items"] == N
    res = audit(cfg, load_job_data(cfg), reps=100, seed=0, workers=1)
    assert res.reps == 100 and res.overall["familywise_failure"] <= 0.1


def _refused(out, words):
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_mistakes_are_one_line_errors_with_exit_status_2(logs, tmp_path):
    t = tmp_path / "t.parquet"
    _refused(_cli("inspect-table", logs["strong"], logs["short"], "--out", t),
             "logs 'mockllm/strong' and 'mockllm/short' do not cover the same samples ('mockllm/short' lacks 150")
    _refused(_cli("inspect-table", logs["stopped"], "--out", t), "were stopped early by 'certsel'")
    _refused(_cli("inspect-table", logs["strong"], "--scorer", "match", "--out", t),
             "unknown scorer 'match'; the task's scorers are: recorded_score")
    _refused(_cli("inspect-table", logs["words"], "--out", t), "score 'maybe' is not a number")
    _refused(_cli("inspect-table", logs["strong"], logs["strong"], "--out", t), "two logs are both")
    _refused(_cli("inspect-table", tmp_path / "nowhere", "--out", t), "no such log file or folder")
    _refused(_cli("inspect-table", tmp_path, "--out", t), "no inspect log (.eval or .json) in this folder")
    assert not t.exists()


def test_the_suggested_job_runs_as_printed(logs, tmp_path, monkeypatch):
    """inspect-table's last line is a command that runs: the job it names is complete and valid
    for the table (R-Eval: the table has no judge; every sample as the budget)."""
    import shlex

    from certsel import cli

    out = _cli("inspect-table", logs["strong"], logs["medium"], logs["weak"], "--out", tmp_path / "qa.parquet")
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("certify with: certsel run "), last
    command = shlex.split(last.removeprefix("certify with: ").split("  (")[0])
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    assert cli.main([*command[1:], "--quiet"]) == 0
    # run again, the job file (perhaps edited since) is the user's: kept as it is
    job = pathlib.Path(command[2])
    job.write_text(job.read_text().replace("alpha: 0.2", "alpha: 0.3"))
    out = _cli("inspect-table", logs["strong"], logs["medium"], logs["weak"], "--out", tmp_path / "qa.parquet")
    assert out.returncode == 0 and "kept as it is" in out.stdout and "alpha: 0.3" in job.read_text()
