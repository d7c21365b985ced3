"""A whole job through real Ray and a real MLflow SQLite store, read back with the MLflow client."""

import json
import os
import subprocess
import sys
import math

import pytest
from certsel.config import parse_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.certificate import certificate
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from certsel.workers.replay import DATA_DIR
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{tmp}/store.db"
    cfg = parse_config({
        "name": "quant-test",
        "data": {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"), "judge": "loss_judge_best",
                 "order": "rank"},
        "policy": {"kind": "r-autoeval+"}, "objective": {"column": "avg_bitwidth"},
        "budget": {"n": 100, "r": 3, "batch": 25}, "seed": 3,
        "tracking": {"uri": uri, "experiment": "certsel-test", "intervals": "every_round"},
        "state": {"dir": str(tmp / "jobs")},
        "scheduling": {"start": "top"},  # every config tested: each has its MLflow run
    })
    result, run_id = execute(cfg, output=tmp / "report")
    return cfg, result, run_id, MlflowClient(uri), uri, tmp


def test_parent_run_params_metrics_tags(job):
    cfg, result, run_id, client, _, _ = job
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert (p["alpha"], p["delta"], p["policy"], p["betting"], p["procedure"]) == ("0.1", "0.1", "r-autoeval+", "up", "fst")
    assert (p["budget_n"], p["budget_r"], p["seed"], p["n_candidates"]) == ("100", "3", "3", "48")
    assert len(p["data_fingerprint"]) == 16
    m = run.data.metrics
    assert m["labels_human"] == result.spent["human"] and m["full_budget_human"] == 48 * 100
    assert 0 < m["saved_fraction_human"] < 1
    assert run.data.tags["certsel.selected"] == str(result.selected)
    assert m["selected_objective"] == result.selected_record.objective
    # the stops, counted as the certificate's candidates say them
    said = certificate(result).candidates
    assert m["n_futile"] == sum(c.status == "futile" for c in said)
    assert m["n_budget_stopped"] == sum((c.reason or "").startswith("budget stop") for c in said)
    assert m["n_budget_stopped"] >= 1  # not vacuous: this job's boundary config (mx_m4_r8_k16) is stopped


def test_the_runs_table_view_shows_the_results(job):
    """The experiment carries certsel's saved view (one row per job, the results as columns),
    every column of it is a value the job's run holds (cost and GPU time only for jobs with
    prices or servers), the selection is a parameter, parameters that do not apply to the
    policy are not logged, and the run's clock starts with the command."""
    cfg, result, run_id, client, _, _ = job
    from certsel.orchestrator.outputs.mlflow_store import RESULTS_VIEW, ui_link

    exp = client.get_experiment_by_name("certsel-test")
    envelope = json.loads(exp.tags[f"mlflow.sharedViewState.{RESULTS_VIEW}"])
    state = json.loads(envelope["state"])
    assert state["searchFilter"] == "tags.`certsel.kind` = 'job'"
    shown = client.search_runs([exp.experiment_id], state["searchFilter"])
    assert [r.info.run_id for r in shown] == [run_id]  # the candidates' runs are not rows
    run = client.get_run(run_id)
    have = {**{f"params.`{k}`": v for k, v in run.data.params.items()},
            **{f"metrics.`{k}`": v for k, v in run.data.metrics.items()}}
    optional = {"metrics.`cost_total`", "metrics.`gpu_seconds`"}
    assert set(state["selectedColumns"]) - optional <= set(have)
    assert have["params.`selected`"] == result.selected and have["metrics.`n_certified`"] == len(result.certified)
    assert have["metrics.`human_labels_saved_percent`"] == round(100 * (1 - result.spent["human"] / (48 * 100)), 1)
    assert "radius" not in run.data.params and "partition" not in run.data.params  # Cer-Eval's options
    took = (run.info.end_time - run.info.start_time) / 1000  # from the command's start, not the run's creation
    assert took >= result.stages.get("starting Ray", 0.0) + result.stages["creating MLflow runs"] + result.stages["rounds"]
    assert ui_link("http://h:5000", exp.experiment_id).endswith(f"/runs?workflowType=machine_learning"
                                                                f"&viewStateShareKey={RESULTS_VIEW}")


def test_nested_runs_hold_step_metrics_and_final_tags(job):
    cfg, result, run_id, client, _, _ = job
    exp = client.get_experiment_by_name("certsel-test")
    kids = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
                              max_results=100)
    assert len(kids) == 48
    by_name = {k.data.tags["candidate"]: k for k in kids}
    assert all(k.info.status == "FINISHED" for k in kids)
    for rec in result.records:
        kid = by_name[rec.name]
        assert kid.data.tags["certified"] == str(rec.name in result.certified).lower()
        assert kid.data.tags["selected"] == str(rec.name == result.selected).lower()
        assert kid.data.tags["status"] == rec.status
        if rec.t == 0:
            continue
        hist = client.get_metric_history(kid.info.run_id, "log_evalue_path")
        assert [h.step for h in sorted(hist, key=lambda h: h.step)] == list(range(1, rec.t + 1))
        assert max(h.value for h in hist) == pytest.approx(max(rec.path))
        labels = client.get_metric_history(kid.info.run_id, "labels_human")
        assert sorted(h.value for h in labels)[-1] == rec.n_human
        lows = client.get_metric_history(kid.info.run_id, "ci_low")
        assert len(lows) == len(rec.rounds)  # one interval per round (intervals: every_round)
        weights = [client.get_metric_history(kid.info.run_id, f"rho_weight_{s}")[-1].value for s in range(10)]
        assert sum(weights) == pytest.approx(1.0)


def test_artifacts_and_certificate_read_back(job):
    cfg, result, run_id, client, uri, tmp = job
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"selection.json", "report.md", "report.html", "evalue_paths.png", "bounds.png",
            "selected_vs_budget.png"} <= names
    cert = load_certificate(run_id, uri)
    local = json.loads((tmp / "report" / "selection.json").read_text())
    assert cert == local
    assert cert["selected"] == result.selected and cert["certified_set"] == result.certified
    assert cert["procedure"] == {"name": "fst", "alpha": 0.1, "delta": 0.1, "level": result.level, "candidates": 48}
    html = (tmp / "report" / "report.html").read_text()
    # one file that opens anywhere: plots embedded, nothing linked; the selection said first
    assert "<img" in html and 'src="data:image/png;base64,' in html and 'src="evalue' not in html
    assert f"Deploy {result.selected}: R &lt;= 0.1 at 0.9 confidence" in html and 'class="selected' in html
    assert "R is a candidate&#39;s risk" in html  # escaped (markupsafe's form)
    ev = cert["evidence"]
    assert ev["e_value"] >= 1 / 0.1 and ev["ci"][0] <= ev["ci"][1]
    assert math.isclose(math.log(ev["e_value"]), ev["log_e_value"], rel_tol=1e-4)
    assert cert["labels"]["spent"] == result.spent and cert["labels"]["full_budget"] == result.full
    # a candidate run id leads to its job's certificate
    kid = client.search_runs([client.get_run(run_id).info.experiment_id],
                             filter_string=f"tags.mlflow.parentRunId = '{run_id}'", max_results=1)[0]
    assert load_certificate(kid.info.run_id, uri)["selected"] == cert["selected"]
    fresh = certificate(result)
    assert fresh.as_json()["candidates"] == cert["candidates"]


def _bounds_agree(cert, alpha):
    """Every certified candidate's one-sided bound is at most alpha; every candidate that ran
    and ended uncertified on its own evidence has its bound above alpha."""
    ran = [c for c in cert["candidates"] if c["labels_human"] > 0]
    assert ran and all(c["upper_bound"] is not None for c in ran)
    for c in ran:
        if c["certified"]:
            assert c["upper_bound"] <= alpha
        elif c["status"] in ("not certified", "above alpha"):
            assert c["upper_bound"] > alpha


def test_certified_candidates_have_upper_bounds_below_alpha(job):
    cfg, result, run_id, client, uri, tmp = job
    cert = load_certificate(run_id, uri)
    _bounds_agree(cert, cfg.alpha)
    assert cert["evidence"]["upper_bound"] <= cfg.alpha < cert["evidence"]["ci"][1]  # one-sided is tighter here
    sel = next(r for r in result.records if r.name == result.selected)
    kid = next(k for k in client.search_runs([client.get_run(run_id).info.experiment_id],
                                             f"tags.`mlflow.parentRunId` = '{run_id}'")
               if k.data.tags["candidate"] == sel.name)
    assert kid.data.metrics["final_upper_bound"] == pytest.approx(sel.upper_bound)
    # what a person reads in the MLflow UI: descriptions, and the decision as metrics next to the threshold
    assert kid.data.metrics["selected"] == 1.0 and kid.data.metrics["certified"] == 1.0
    assert kid.data.metrics["threshold"] == pytest.approx(10.0) and kid.data.metrics["log_threshold"] > 0
    assert kid.data.tags["mlflow.note.content"].startswith(f"**{sel.name}: certified** (selected)")
    assert client.get_run(run_id).data.tags["mlflow.note.content"].startswith(f"**Selected: {sel.name}.**")


def _breaks_at_round_2(records, rounds):
    if rounds == 2:
        raise RuntimeError("progress display crashed")


def test_failure_mid_job_marks_runs_failed(tmp_path, monkeypatch):
    """A job whose labels take long is logged as it runs: one that breaks after its runs exist leaves them FAILED,
    never FINISHED."""
    (tmp_path / "slow_labels.py").write_text("import numpy as np\n"
                                             "def losses(candidate, items, role):\n"
                                             "    return np.zeros(len(items))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    uri = f"sqlite:///{tmp_path}/store.db"
    cfg = parse_config({
        "source": {"python": "slow_labels:losses", "items": 500,
                   "candidates": [{"id": c, "objective": float(k)} for k, c in enumerate("abc")]},
        "policy": {"kind": "r-eval"}, "procedure": "bonferroni", "objective": {"column": "size"},
        "budget": {"n": 50, "batch": 10}, "runtime": "local",
        "tracking": {"uri": uri}, "state": {"dir": str(tmp_path / "jobs")},
    })
    with pytest.raises(RuntimeError, match="progress display crashed"):
        execute(cfg, progress=_breaks_at_round_2)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("certsel").experiment_id])
    assert len(runs) == 4
    assert {r.info.status for r in runs} == {"FAILED"}


def test_failed_table_job_leaves_no_run(tmp_path):
    """A recorded table's runs are logged when it ends (outputs/output_process.py): one that breaks mid-job leaves
    none, and its folder says it failed."""
    uri = f"sqlite:///{tmp_path}/store.db"
    cfg = parse_config({
        "data": {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"), "judge": "loss_judge_best",
                 "order": "rank"},
        "candidates": ["mx_m10_r8_k16", "mx_m9_r8_k16", "mx_m8_r8_k16"],
        "objective": {"column": "avg_bitwidth"}, "budget": {"n": 50, "r": 1, "batch": 10},
        "tracking": {"uri": uri}, "state": {"dir": str(tmp_path / "jobs")},
    })
    with pytest.raises(RuntimeError, match="progress display crashed"):
        execute(cfg, progress=_breaks_at_round_2)
    client = MlflowClient(uri)
    assert client.search_runs([client.get_experiment_by_name("certsel").experiment_id]) == []
    (job,) = (tmp_path / "jobs").iterdir()
    assert json.loads((job / "job.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("example", ["prompts.yaml", "alpacaeval_ranking.yaml"])
def test_bundled_examples_run(tmp_path, example):
    from certsel.config import load_config

    examples = DATA_DIR.parent
    cfg = load_config(examples / example, [f"tracking.uri=sqlite:///{tmp_path}/store.db",
                                           f"state.dir={tmp_path}/jobs"])
    result, run_id = execute(cfg)
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    assert cert["labels"]["spent"]["human"] < cert["labels"]["full_budget"]["human"]
    if example == "prompts.yaml":
        # Bonferroni with pruning: a template certified at level delta/K, shortest first
        assert cert["selected"] is not None and cert["selected"] in cert["certified_set"]
        sel = next(c for c in cert["candidates"] if c["selected"])
        assert sel["e_value"] >= 25 / 0.1
        assert all(c["objective"] >= sel["objective"] for c in cert["candidates"] if c["certified"])
        _bounds_agree(cert, cfg.alpha)
    else:
        rk = cert["ranking"]
        assert rk["pairs"] == 66 and rk["pairs_certified"] >= 10
        assert rk["order"][0] == "FuseChat-Llama-3.2-1B-Instruct"  # the lowest-loss model on this table
        # pairwise jobs log per-round metrics like the others: one step per round a model was labelled
        client = MlflowClient(f"sqlite:///{tmp_path}/store.db")
        kids = client.search_runs([client.get_run(run_id).info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{run_id}'")
        top = next(k for k in kids if k.data.tags["candidate"] == rk["order"][0])
        history = client.get_metric_history(top.info.run_id, "labels_human")
        assert len(history) > 2 and [m.step for m in history] == sorted(m.step for m in history)
        wins = client.get_metric_history(top.info.run_id, "certified_wins")
        assert wins[-1].value == len(rk["better"][rk["order"][0]])
        # the pairs' intervals agree with the certified orders: 0 is excluded exactly for those
        for pair, (lo, hi) in rk["difference_intervals"].items():
            a, b = pair.split(" - ", 1)
            assert (hi < 0) == (b in rk["better_direct"][a]) and (lo > 0) == (a in rk["better_direct"][b])
        assert rk["possible_winners"] == [m for m in rk["order"] if not any(m in w for w in rk["better"].values())]


# what MLflow reads to decide it runs under CI or tests (its telemetry is off there anyway):
# removed, so the probe sees what a user's machine does
_CI_SIGNS = ("PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL", "TRAVIS", "TF_BUILD",
             "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE", "TEAMCITY_VERSION", "CLOUD_RUN_EXECUTION",
             "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID", "DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY")

_PROBE = """
import json, sys, time
hosts = []
def hook(event, args):  # every name looked up and every address connected to
    if event == "socket.getaddrinfo":
        hosts.append(str(args[0]))
    elif event == "socket.connect" and isinstance(args[1], tuple):
        hosts.append(str(args[1][0]))
sys.addaudithook(hook)
from certsel.orchestrator.outputs.tracking import JobTracker
JobTracker(sys.argv[1], "certsel")
time.sleep(3)  # MLflow's telemetry thread has had its chance
print(json.dumps(sorted(set(hosts))))
"""


def test_mlflow_telemetry_is_off_unless_asked(tmp_path):
    """A tracker on a local store looks up no host and connects nowhere; with
    MLFLOW_DISABLE_TELEMETRY=false (the documented way back on) MLflow's telemetry does reach
    out, which shows the probe sees it."""
    env = {k: v for k, v in os.environ.items() if k not in _CI_SIGNS}

    def hosts(db, **extra):
        p = subprocess.run([sys.executable, "-c", _PROBE, f"sqlite:///{tmp_path / db}"], env={**env, **extra},
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    assert hosts("off.db") == []
    assert any("mlflow" in h for h in hosts("on.db", MLFLOW_DISABLE_TELEMETRY="false"))


def test_a_gate_run_counts_its_futile_candidates(tmp_path):
    """n_futile counts what the job ended as futile: a gate whose 'bad' candidate (R = 0.6 at alpha 0.2) fails early."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from certsel.gates import gate_config

    rng = np.random.default_rng(3)
    names, risks = ["good", "bad"], [0.02, 0.6]
    loss = np.concatenate([(rng.random(200) < r).astype(float) for r in risks])
    pq.write_table(pa.table({"candidate": np.repeat(names, 200), "item": np.tile(np.arange(200), 2),
                             "loss_human": loss}), tmp_path / "t.parquet")
    uri = f"sqlite:///{tmp_path}/store.db"
    cfg = gate_config({"data": {"path": str(tmp_path / "t.parquet")}, "policy": {"kind": "r-eval"}, "alpha": 0.2,
                       "delta": 0.1, "budget": {"n": 100, "batch": 20}, "seed": 0,
                       "state": {"dir": str(tmp_path / "jobs"), "store": None}, "tracking": {"uri": uri}})
    result, run_id = execute(cfg, output=tmp_path / "report")
    statuses = {r.name: r.status.value for r in result.records}
    assert statuses["bad"] == "futile"
    m = MlflowClient(uri).get_run(run_id).data.metrics
    assert m["n_futile"] == 1 and m["n_budget_stopped"] == 0
