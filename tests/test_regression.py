"""Regression gates against a baseline (``regression:``, ``certsel gate --baseline``) and release series (``--series``).

The claim's transform against a literal loop, the type-I error of pass at the boundary (E[s] = E[s_base] - m exactly)
over 2,000 simulated runs, and real gates (a real Ray, the real label store): the baseline's labels bought once and
reused by a later gate of another candidate, a candidate's own labels serving it when it becomes the baseline, and a
series' positions and levels kept across reruns."""

import json
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from certsel.config import ConfigError, parse_config
from certsel.errors import InputError
from certsel.gates import RegressionAsk, gate
from certsel.orchestrator.engine.series import release_level
from certsel.policies.autoeval import log_evalue_paths
from certsel.policies.regression import Regression


def test_the_paired_loss_is_the_literal_transform_and_its_threshold_the_claim():
    rng = np.random.default_rng(0)
    ell, b = rng.random(50), rng.random(50)
    for margin, sup in ((0.0, False), (0.05, False), (0.03, True)):
        claim = Regression(margin, sup)
        m = -margin if sup else margin
        assert claim.alpha == pytest.approx((1 + m) / 2)
        u = claim.losses(ell, b)
        for i in range(50):
            assert u[i] == pytest.approx((ell[i] - b[i] + 1) / 2)
        # E[u] <= alpha  <=>  mean(1 - ell) >= mean(1 - b) - m
        assert (u.mean() <= claim.alpha) == ((1 - ell).mean() >= (1 - b).mean() - m - 1e-15)
        assert claim.difference_bound(u.mean()) == pytest.approx((1 - ell).mean() - (1 - b).mean())
    with pytest.raises(ValueError, match="margin"):
        Regression(1.0)
    with pytest.raises(ValueError, match="paired"):
        Regression(0.1).losses(ell, b[:10])


@pytest.mark.slow
@pytest.mark.parametrize("margin,superiority", [(0.02, False), (0.0, True)])
def test_pass_at_the_boundary_is_wrong_at_most_delta_of_the_time(margin, superiority):
    """2,000 runs at E[s] - E[s_base] = -m exactly (correlated 0/1 scores, as two models of one family are): a pass
    needs the e-process to reach 1/delta within the budget; its rate bounds the type-I error of pass."""
    from scipy.stats import beta

    delta, reps, n = 0.1, 2000, 1000
    claim = Regression(margin, superiority)
    m = claim.shift
    rng = np.random.default_rng(3)
    base = (rng.random((reps, n)) < 0.6).astype(float)  # baseline scores, accuracy 0.6
    # the candidate keeps the baseline's answer, flips a right one to wrong with p_down and a wrong one to right
    # with p_up, so that E[s] - E[s_base] = 0.4 p_up - 0.6 p_down = -m exactly
    p_down = 0.1
    p_up = (0.6 * p_down - m) / 0.4
    flip = rng.random((reps, n))
    cand = np.where(base == 1, flip >= p_down, flip < p_up).astype(float)
    losses = claim.losses(1 - cand, 1 - base)
    log_e = log_evalue_paths(losses, alpha=claim.alpha, delta=delta, rhos=(0.0,), betting="up", horizon=n,
                             observation="split")
    passes = int(np.sum(log_e.max(axis=1) >= np.log(1 / delta)))
    lower = beta.ppf(0.01, passes, reps - passes + 1) if passes else 0.0
    assert lower <= delta and passes / reps <= delta, f"{passes} passes in {reps} runs at the boundary"


def test_release_levels_sum_to_the_series_delta():
    levels = np.array([release_level(0.1, k) for k in range(1, 100_001)])
    assert levels[0] == pytest.approx(0.05) and levels[1] == pytest.approx(0.1 / 6)
    assert levels.sum() < 0.1 and levels.sum() == pytest.approx(0.1, rel=1e-4)


def _table(tmp_path, n_items=600):
    """A baseline (accuracy 0.6) and three releases paired with it: 'same' (its answers), 'worse' (-0.15) and
    'better' (+0.2), as 0/1 scores on the same items."""
    rng = np.random.default_rng(5)
    base = (rng.random(n_items) < 0.6).astype(float)
    flip = rng.random(n_items)
    scores = {"v1": base, "same": base.copy(),
              "worse": np.where(base == 1, flip >= 0.25, 0.0).astype(float),
              "better": np.where(base == 1, 1.0, flip < 0.5).astype(float)}
    rows = {"candidate": [], "item": [], "score": []}
    for name, s in scores.items():
        rows["candidate"] += [name] * n_items
        rows["item"] += list(range(n_items))
        rows["score"] += s.tolist()
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table(rows), path)
    return path


def _job(tmp_path, **extra) -> dict:
    return {"data": {"path": str(_table(tmp_path)), "score": "score"}, "regression": {"baseline": "v1", "margin": 0.05},
            "policy": {"kind": "r-eval"}, "delta": 0.1, "budget": {"n": 400, "batch": 40}, "seed": 1,
            "state": {"dir": str(tmp_path / "jobs"), "store": str(tmp_path / "labels.db")}, **extra}


def test_a_regression_job_states_its_claim_and_refuses_what_it_cannot_be(tmp_path):
    raw = _job_raw(tmp_path)
    cfg = parse_config({**raw, "procedure": "gate"})
    assert cfg.alpha == pytest.approx(0.525) and cfg.regression.claim.words("v1") == "score >= 'v1' - 0.05"
    for bad, match in (({"alpha": 0.1}, "give one target"),
                       ({"candidates": ["v1", "same"]}, "lists the baseline"),
                       ({"policy": {"kind": "cer-eval"}}, "testing policy"),
                       ({"series": "s", "procedure": "fst", "objective": {"column": "x"}}, "series")):
        with pytest.raises(ConfigError, match=match):
            parse_config({**raw, "procedure": "gate", **bad})
    with pytest.raises(InputError, match="name its --baseline"):
        RegressionAsk(margin=0.1).apply({"alpha": 0.1})


def _job_raw(tmp_path):
    return {"data": {"path": str(_table(tmp_path)), "score": "score"}, "policy": {"kind": "r-eval"},
            "regression": {"baseline": "v1", "margin": 0.05}}


@pytest.mark.integration
def test_the_baseline_is_labelled_once_and_each_release_serves_as_the_next_baseline(tmp_path, ray_session):
    first = gate(_job(tmp_path), only=["worse"], track=False)
    assert first.outcomes == {"worse": "fail"}
    row = first.rows[0]
    assert row.baseline == "v1" and row.baseline_bought == row.labels > 0 and row.baseline_reused == 0
    assert row.bound_side == "difference"
    reason = first.selection.candidates[0].reason  # the futility stop, in the claim's words
    assert reason.startswith("score <= 'v1' - 0.05 certified at the futility level after"), reason
    # another release against the same baseline: the baseline's labels the first gate bought are reused
    second = gate(_job(tmp_path), only=["better"], track=False)
    assert second.outcomes == {"better": "pass"}
    b = second.rows[0]
    paired_b = b.labels + b.reused
    assert b.baseline_reused == min(paired_b, row.labels) and b.baseline_bought == paired_b - b.baseline_reused
    assert b.bound is not None and b.bound >= -0.05
    # 'better' ships and becomes the baseline: its own labels, bought as a candidate, serve as the baseline's, and
    # 'worse' (gated again, now against 'better') reuses its own from the first gate
    third = gate(_job(tmp_path, regression={"baseline": "better", "margin": 0.05}), only=["worse"], track=False)
    t = third.rows[0]
    paired_t = t.labels + t.reused
    assert t.outcome == "fail" and paired_t > 0  # 0.35 below 'better'
    assert t.baseline_reused == min(paired_t, paired_b) and t.reused == min(paired_t, row.labels)
    cert = json.loads((third.output_dir / "selection.json").read_text())
    assert cert["claim"]["kind"] == "regression" and cert["claim"]["baseline"] == "better"
    fig = cert["candidates"][0]["regression"]
    assert fig["baseline_reused"] == t.baseline_reused and fig["on_full_table"] == pytest.approx(-0.35, abs=0.06)


@pytest.mark.integration
def test_a_series_keeps_each_releases_place_and_level_across_reruns(tmp_path, ray_session):
    job = _job(tmp_path)
    one = gate(job, only=["better"], series="app", track=False)
    cert = one.selection
    assert cert.gate.series.releases == [1] and cert.gate.delta == pytest.approx(0.05)
    two = gate(job, only=["worse"], series="app", track=False)
    assert two.selection.gate.series.releases == [2] and two.selection.gate.delta == pytest.approx(0.1 / 6)
    again = gate(job, only=["better"], series="app", track=False, overrides=["seed=9"])  # a rerun: same place
    assert again.selection.gate.series.releases == [1] and again.outcomes == {"better": "pass"}
    assert sum(r.labels for r in again.rows) == 0  # its claim was decided: nothing bought
    db = sqlite3.connect(tmp_path / "labels.db")
    assert [r[0] for r in db.execute("select candidate from series where series = 'app' order by release")] == \
        ["better", "worse"]
    db.close()
    with pytest.raises(InputError, match="was started at delta 0.1"):
        gate(job, only=["same"], series="app", track=False, overrides=["delta=0.2"])
    assert "any false pass or false fail over every release" in one.selection.gate.note
    # a finished job's SQLite logs and the store keep no write-ahead log behind (what a CI cache would carry)
    wals = [*tmp_path.glob("jobs/*/labels/*.db-wal"), tmp_path / "labels.db-wal"]
    assert wals and all(not w.exists() or w.stat().st_size == 0 for w in wals)


@pytest.mark.integration
def test_a_live_regression_gate_pairs_each_model_with_the_served_baseline(tmp_path, ray_session):
    """Live models on a real HTTP server (tests/helpers/servers.py): the baseline 'exact-short' is asked the same
    items as each candidate, and each paired loss is (l - l_base + 1) / 2 of the two answers' own losses."""
    import yaml

    from helpers.jobs import write_job
    from helpers.servers import adder_server

    with adder_server() as (url, srv):
        raw = yaml.safe_load(write_job(tmp_path, url).read_text())
        raw["live"]["candidates"].append({"id": "exact-long", "base_url": url, "model": "exact",
                                          "template": "What is {question}?"})
        for key in ("alpha", "objective"):
            raw.pop(key)
        # the budget stop off: exact-long passes only near the end of this small budget
        raw.update(procedure="gate", regression={"baseline": "exact-short", "margin": 0.05},
                   budget={"n": 100, "r": 3, "batch": 20}, scheduling={"budget_stop": None})
        job = tmp_path / "regression.yaml"
        job.write_text(yaml.safe_dump(raw))
        res = gate(job, track=False, output=tmp_path / "out")
    # weak is wrong when 7 divides a*b (27% of the items): 0.27 below the baseline; exact-long answers as it does
    assert res.outcomes == {"weak-short": "fail", "weak-long": "fail", "exact-long": "pass"}, res.rows
    for row in res.rows:
        assert row.bound_side == "difference" and row.baseline == "exact-short"
        assert row.baseline_bought == row.labels > 0 and row.baseline_reused == 0
    cert = res.selection
    assert cert.claim.kind == "regression" and [c.candidate for c in cert.candidates] == \
        ["weak-short", "weak-long", "exact-long"]
    log = pq.read_table(tmp_path / "out" / "labels.parquet").to_pandas()
    human = log[log.role == "human"]
    a_b = human.item_id.str.split("+", expand=True).astype(int)
    weak_wrong = ((a_b[0] * a_b[1]) % 7 == 0).to_numpy()
    expected = np.where(human.candidate.str.startswith("weak") & weak_wrong, 1.0, 0.5)
    np.testing.assert_array_equal(human.loss.to_numpy(), expected)
    assert (log[log.role == "judge"].loss.isin([0.5, 1.0])).all()


def test_a_live_regression_job_takes_its_baseline_as_the_reference(tmp_path):
    (tmp_path / "items.jsonl").write_text('{"id": "q1", "question": "1+1", "answer": "2"}\n')
    live = {"items": str(tmp_path / "items.jsonl"), "candidates": [
        {"id": "v1", "base_url": "http://127.0.0.1:9", "model": "m1"},
        {"id": "v2", "base_url": "http://127.0.0.1:9", "model": "m2"}]}
    raw = {"live": live, "policy": {"kind": "r-eval"}, "procedure": "gate",
           "regression": {"baseline": "v1", "margin": 0.02}}
    cfg = parse_config(raw)
    assert cfg.live.reference == "v1" and cfg.alpha == pytest.approx(0.51)
    for bad, match in (({"regression": {"baseline": "v9"}}, "'v9' is not among live.candidates"),
                       ({"live": {**live, "reference": "v2"}}, "is not the regression's baseline"),
                       ({"live": {**live, "judge": {"base_url": "http://127.0.0.1:9", "model": "j",
                                                    "mode": "pairwise"}}}, "pairwise judge"),
                       ({"candidates": ["v1", "v2"]}, "lists the baseline")):
        with pytest.raises(ConfigError, match=match):
            parse_config({**raw, **bad})
    said = []
    asked = RegressionAsk("v2", 0.05).apply({**raw, "live": {**live, "reference": "v1"}}, warn=said.append)
    assert parse_config(asked).live.reference == "v2" and "live.reference" in said[0]


def test_a_regression_job_without_a_job_folder_returns_its_paired_labels(tmp_path):
    """In one process with no job folder (the API's run_job, the behaviour guard), the label log is the paired losses
    the test saw, each item once per role."""
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data

    raw = {**_job(tmp_path), "procedure": "gate"}
    raw.pop("state")
    cfg = parse_config(raw)
    res = run_job(cfg, load_job_data(cfg), LocalRuntime(1))
    for r in res.records:
        log = res.labels[r.name]
        human = log.loss[log.role == "human"]
        assert human.size == r.n_human > 0 and np.isin(human, [0.0, 0.5, 1.0]).all()
        assert np.unique(log.item[log.role == "human"]).size == human.size
