"""Recovery jobs (``recovery:`` with ``data.score`` and ``data.reference``): the config and
the table's one-line errors, and a job through a real Ray and MLflow whose certificate states
recoveries that are recomputed here from its label log."""

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from certsel.config import ConfigError, parse_config
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.policies.autoeval import log_evalue_paths
from certsel.policies.recovery import Recovery, recovery_decision_bound
from certsel.workers.replay import DATA_DIR

TRIVIA = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
# around the 95% frontier: true recoveries 0.99, 0.98, 0.97, 0.96, 0.90
NEAR = ["mx_m6_r2_k16", "mx_m5_r4_k16", "mx_m5_r2_k16", "mx_m5_r2_k64", "mx_m4_r8_k16"]


def _raw(tmp_path, **over):
    raw = {"data": {"path": str(TRIVIA), "score": "score_human", "reference": "score_fp_human", "order": "rank"},
           "recovery": {"at_least": 0.95, "reference_name": "full precision"}, "policy": {"kind": "r-eval"},
           "procedure": "fst", "objective": {"column": "avg_bitwidth"}, "delta": 0.1, "candidates": NEAR,
           "budget": {"n": 1200, "batch": 100}, "seed": 2,
           "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")}}
    return {**raw, **over}


def test_the_job_runs_as_a_risk_test_at_one_over_one_plus_r(tmp_path):
    cfg = parse_config(_raw(tmp_path))
    assert cfg.alpha == pytest.approx(1 / 1.95) and cfg.recovery_reference == "full precision"
    data = load_job_data(cfg)
    table = pq.read_table(TRIVIA).to_pandas()
    for k, name in enumerate(data.names):
        rows = table[table.candidate == name].sort_values("item")
        s, ref = rows.score_human.to_numpy(np.float64), rows.score_fp_human.to_numpy(np.float64)
        np.testing.assert_allclose(data.table.human[k], (0.95 * ref - s + 1) / 1.95, atol=1e-15)
        assert data.recovery.on_table[k] == pytest.approx(s.mean() / ref.mean(), abs=1e-12)
        # certifying R <= alpha on these losses is certifying the recovery
        assert (data.table.true_risk[k] <= cfg.alpha) == (data.recovery.on_table[k] >= 0.95)
    assert parse_config(_raw(tmp_path, recovery=0.9)).recovery.at_least == 0.9  # a bare number is at_least


@pytest.mark.parametrize("change, message", [
    ({"alpha": 0.1}, "give one target: recovery"),
    ({"policy": {"kind": "seq"}, "procedure": "bonferroni"}, "recovery: needs a testing policy"),
    ({"data": {"path": str(TRIVIA), "score": "score_human", "order": "rank"}}, "recovery: needs data.reference"),
    ({"data": {"path": str(TRIVIA), "score": "score_human", "reference": "score_fp_human", "order": "rank",
               "judge": "loss_judge_best"}}, "data.judge is a loss column"),
    ({"data": {"path": str(TRIVIA), "score": "score_human", "reference": "score_fp_human", "order": "rank",
               "judge_score": "score_human"}}, "give both data.judge_score and data.judge_reference"),
    ({"policy": {"kind": "r-autoeval+"}}, "needs data.judge_score and data.judge_reference"),
    ({"recovery": 0}, "recovery.at_least"),
    ({"data": None, "candidates": None, "source": {"python": "m:f", "items": 100, "candidates": ["a", "b"]}},
     "or a live job with live.reference; a python source has neither"),
    ({"recovery": None}, "data.score, data.reference: score columns are read by recovery jobs only"),
])
def test_config_mistakes_are_one_line_errors(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(_raw(tmp_path, **change))
    assert "\n" not in str(err.value)


def _table(tmp_path, score, reference):
    """A small score table: 2 candidates x 40 items."""
    k = np.repeat([0, 1], 40)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"candidate": np.array(["a", "b"])[k], "item": np.tile(np.arange(40), 2),
                             "s": np.asarray(score, dtype=float), "s_ref": np.asarray(reference, dtype=float),
                             "bits": np.where(k == 0, 8.0, 4.0)}), path)
    return path


@pytest.mark.parametrize("score, reference, message", [
    (np.full(80, 1.5), np.ones(80), "column 's' has values outside [0.0, 1.0]"),
    (np.ones(80), np.r_[np.ones(40), np.zeros(40)], "is 0 on every item for candidate(s) b: recovery against a zero"),
])
def test_bad_tables_are_one_line_errors_before_anything_runs(tmp_path, score, reference, message):
    path = _table(tmp_path, score, reference)
    cfg = parse_config(_raw(tmp_path, data={"path": str(path), "score": "s", "reference": "s_ref"}, candidates=None,
                            procedure="bonferroni", objective={"column": "bits"}, budget={"n": 20}))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_job_data(cfg)


@pytest.mark.integration
def test_a_zero_reference_through_the_cli_exits_2_and_buys_nothing(tmp_path):
    path = _table(tmp_path, np.ones(80), np.r_[np.ones(40), np.zeros(40)])
    job = tmp_path / "job.json"
    raw = _raw(tmp_path, data={"path": str(path), "score": "s", "reference": "s_ref"}, candidates=None,
               procedure="bonferroni", objective={"column": "bits"}, budget={"n": 20})
    job.write_text(json.dumps(raw))
    out = subprocess.run([sys.executable, "-m", "certsel.cli", "run", str(job)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "recovery against a zero reference score is undefined" in lines[0]
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "store.db").exists()


@pytest.mark.integration
def test_a_recovery_job_states_recoveries_recomputed_from_its_label_log(tmp_path):
    from certsel.orchestrator.commands.job import execute
    from mlflow.tracking import MlflowClient

    cfg = parse_config(_raw(tmp_path))
    data = load_job_data(cfg)
    result, run_id = execute(cfg, output=tmp_path / "out")
    cert = json.loads((tmp_path / "out" / "selection.json").read_text())
    r = 0.95
    assert cert["claim"]["kind"] == "recovery" and cert["claim"]["words"] == "recovery >= 95% of 'full precision'"
    assert cert["procedure"]["alpha"] == pytest.approx(1 / 1.95)
    sel = next(c for c in cert["candidates"] if c["selected"])
    assert cert["certificate"].startswith(f"recovery({sel['candidate']}) >= 95.0% of 'full precision' with "
                                          "probability >= 0.9")
    certified = [c for c in cert["candidates"] if c["certified"]]
    assert certified and len(certified) < len(cert["candidates"])  # both sides occur
    labels = pq.read_table(tmp_path / "out" / "labels.parquet").to_pandas()
    for c in cert["candidates"]:
        rec = c["recovery"]
        # certified exactly when the joint bound is >= r; FST's prefix gets r itself
        assert c["certified"] == (rec["simultaneous_lower_bound"] is not None and rec["simultaneous_lower_bound"] >= r)
        if not c["labels_human"]:
            assert rec["lower_bound"] is None and rec["estimate"] is None
            continue
        k = data.names.index(c["candidate"])
        mine = labels[(labels.candidate == c["candidate"]) & (labels.role == "human")]
        items = mine["item"].to_numpy()[: rec["labels"]]
        s, ref = data.recovery.score[k, items], data.recovery.reference[k, items]
        np.testing.assert_allclose(mine["loss"].to_numpy()[: rec["labels"]], Recovery(r).losses(s, ref), atol=1e-12)
        log_e = log_evalue_paths(Recovery(r).losses(s, ref), alpha=cfg.alpha, delta=0.1, rhos=[0.0],
                                 horizon=cfg.budget.n, observation=cfg.policy.observation)
        assert log_e.max() == pytest.approx(c["log_e_value"], abs=1e-6)
        bound = float(recovery_decision_bound(s, ref, at_least=r, level=c["level"], delta=0.1, horizon=cfg.budget.n,
                                              max_log_evalue=c["log_e_value"], observation=cfg.policy.observation))
        assert rec["lower_bound"] <= bound < rec["lower_bound"] + 2e-6  # printed rounded down
        assert (rec["lower_bound"] >= r) == (c["log_e_value"] >= np.log(1 / c["level"]))
        assert rec["estimate"] == pytest.approx(s.sum() / ref.sum(), abs=1e-6)
        assert rec["on_full_table"] == pytest.approx(float(data.recovery.on_table[k]), abs=1e-6)
    assert cert["evidence"]["recovery"] == sel["recovery"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"Deploy {sel['candidate']}: recovery >= 95.0% of 'full precision'" in md
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    parent = client.get_run(run_id)
    assert "recovery(" in parent.data.tags["mlflow.note.content"]
    child = client.search_runs([parent.info.experiment_id],
                               f"tags.mlflow.parentRunId = '{run_id}' and tags.mlflow.runName = '{sel['candidate']}'")[0]
    assert child.data.metrics["recovery_lower_bound"] == pytest.approx(sel["recovery"]["lower_bound"])
    assert "recovery >= " in child.data.tags["mlflow.note.content"]


def test_a_judge_scores_both_models_and_its_losses_are_compiled_the_same_way(tmp_path):
    rng = np.random.default_rng(3)
    k = np.repeat([0, 1], 60)
    s, ref = (rng.random(120) < 0.7).astype(float), (rng.random(120) < 0.8).astype(float)
    js, jref = np.clip(s + rng.normal(0, 0.1, 120), 0, 1), np.clip(ref + rng.normal(0, 0.1, 120), 0, 1)
    path = tmp_path / "judged.parquet"
    pq.write_table(pa.table({"candidate": np.array(["a", "b"])[k], "item": np.tile(np.arange(60), 2), "s": s,
                             "s_ref": ref, "js": js, "js_ref": jref, "bits": np.where(k == 0, 8.0, 4.0)}), path)
    cfg = parse_config(_raw(tmp_path, data={"path": str(path), "score": "s", "reference": "s_ref", "judge_score": "js",
                                            "judge_reference": "js_ref"}, candidates=None, procedure="bonferroni",
                            objective={"column": "bits"}, policy={"kind": "r-autoeval+"}, budget={"n": 10, "r": 3}))
    assert cfg.judge_name == "js" and cfg.policy.uses_judge
    data = load_job_data(cfg)
    claim = Recovery(0.95)
    np.testing.assert_allclose(data.table.human, claim.losses(s.reshape(2, 60), ref.reshape(2, 60)), atol=1e-15)
    np.testing.assert_allclose(data.table.judge, claim.losses(js.reshape(2, 60), jref.reshape(2, 60)), atol=1e-15)
