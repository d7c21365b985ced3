"""certsel audit: its vectorised repetitions equal the policies run one by one, its coverage
check equals the interval the jobs report, and the command logs an MLflow run."""

import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from certsel.config import parse_config
from certsel.orchestrator.audit.job_audit import _orders, _testing_chunk, audit, clopper_pearson
from certsel.policies.autoeval_bounds import interval_excludes
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.policies import confidence_interval, scheme_rhos
from helpers.policies import candidate
from certsel.workers.replay import ReplaySource
from mlflow.tracking import MlflowClient

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def small_cfg(kind="r-autoeval+", betting="up", **over):
    raw = {"data": {"path": str(EXAMPLES / "data" / "triviaqa_llama31_8b_mx.parquet"), "judge": "loss_judge_best",
                    "order": "rank"},
           "candidates": ["mx_m10_r8_k16", "mx_m5_r2_k64", "mx_m4_r8_k16", "mx_m4_r2_k16"],
           "policy": {"kind": kind, "betting": betting}, "alpha": 0.1, "delta": 0.1,
           "objective": {"column": "avg_bitwidth"}, "budget": {"n": 60, "r": 2, "batch": 20}}
    raw.update(over)
    return parse_config(raw)


@pytest.mark.parametrize("kind,betting", [("r-eval", "up"), ("r-autoeval", "wsr"), ("r-autoeval+", "up"),
                                          ("r-autoeval+", "wsr")])
def test_repetitions_equal_the_candidate_policy(kind, betting):
    cfg = small_cfg(kind, betting)
    data = load_job_data(cfg)
    t = data.table
    n, r = 60, (0 if kind == "r-eval" else 2)
    orders = _orders(np.random.default_rng(5), 3, t.items.size, n * (1 + r))
    log_e, est, classical, grid, obs = _testing_chunk(cfg, t.human, t.judge if r else None, orders, n, r,
                                                      scheme_rhos(kind))
    for rep in range(3):
        for k in range(len(data.names)):
            cand = candidate("c", ReplaySource(t.human[k], t.judge[k]), kind, alpha=0.1, delta=0.1, betting=betting,
                             n=n, human_items=orders[rep, :n], judge_items=orders[rep, n:], r=r)
            path, ests = [], {}
            for step in np.diff(np.concatenate([[0], grid])):
                snap = cand.step(int(step))
                path.extend(snap.path)
                ests[cand.t] = snap.estimate
            np.testing.assert_allclose(log_e[rep, k], path, atol=1e-9)
            np.testing.assert_allclose(est[rep, k], [ests[g] for g in grid], atol=1e-12)
            np.testing.assert_allclose(classical[rep, k], [t.human[k][orders[rep, :g]].mean() for g in grid])


def test_coverage_check_is_the_reported_interval():
    cfg = small_cfg()
    t = load_job_data(cfg).table
    n, r = 60, 2
    orders = _orders(np.random.default_rng(11), 4, t.items.size, n * 3)
    *_, obs = _testing_chunk(cfg, t.human, t.judge, orders, n, r, scheme_rhos("r-autoeval+"))
    for target in (0.02, 0.06, 0.1, 0.2):
        excl = interval_excludes(obs, np.full(4, target)[None, :], delta=cfg.delta, betting=cfg.policy.strategy,
                                horizon=n)
        for rep in range(4):
            for k in range(4):
                h = t.human[k][orders[rep, :n]]
                lo, hi = confidence_interval(h, t.judge[k][orders[rep, :n]], t.judge[k][orders[rep, n:]], delta=0.1,
                                             rhos=scheme_rhos("r-autoeval+"), horizon=n)
                if min(abs(target - lo), abs(target - hi)) > 1e-4:  # away from the bisection's tolerance
                    assert excl[rep, k] == (not lo <= target <= hi)


def test_failure_rates_hold_delta_near_the_boundary():
    """Candidates whose risk sits just above alpha: the worst case for the type-I error."""
    rng = np.random.default_rng(0)
    cfg = small_cfg(alpha=0.1)
    data = load_job_data(cfg)
    t = data.table
    import dataclasses

    human = (rng.random(t.human.shape) < 0.105).astype(float)
    judge = np.where(rng.random(t.human.shape) < 0.8, human, 1 - human)
    table = dataclasses.replace(t, human=human, judge=judge)
    res = audit(cfg, dataclasses.replace(data, table=table), reps=300, seed=1)
    assert all(r["h0"] for r in res.rows)
    for r in res.rows:
        assert r["failure_lower"] <= 0.1 and r["verdict"] == "confirmed"
    assert res.overall["verdict"] == "confirmed" and res.overall["familywise_failure"] <= 0.1


def test_clopper_pearson_against_scipy_binomtest():
    from scipy.stats import binomtest

    for k, n in [(0, 100), (3, 100), (50, 100), (100, 100)]:
        lo, hi = clopper_pearson(k, n, 0.99)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.98, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-9) and hi == pytest.approx(ci.high, abs=1e-9)


@pytest.mark.integration
def test_audit_command_logs_a_run(tmp_path):
    """20 repetitions cannot confirm delta = 0.1: the verdict says so, with how many would,
    and the exit status is 3 (neither confirmed, 0, nor failed, 1)."""
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "quantization.yaml").read_text().replace("data/", str(EXAMPLES / "data") + "/"))
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "audit", str(job), "--reps", "20", "--set",
                        f"tracking.uri=sqlite:///{tmp_path}/s.db", "--set", "budget.n=50", "--out", str(tmp_path / "a")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 3, p.stderr
    assert "20 repetitions" in p.stdout and "INCONCLUSIVE" in p.stdout and "OK" not in p.stdout
    assert "about 44 would" in p.stdout
    warning = [line for line in p.stderr.splitlines() if line.startswith("certsel: warning: ")]
    assert warning == ["certsel: warning: 20 repetitions are too few to confirm delta = 0.1 at 99% confidence "
                       "(about 44 would; --reps 44); exit status 3"]
    run_id = p.stdout.split("MLflow run: ")[1].split()[0]
    client = MlflowClient(f"sqlite:///{tmp_path}/s.db")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["certsel.kind"] == "audit"
    assert run.data.tags["certsel.audit_verdict"] == "inconclusive"
    assert run.data.params["reps"] == "20" and "familywise_failure" in run.data.metrics
    assert {a.path for a in client.list_artifacts(run_id)} == {"audit.json", "audit.md", "audit.png"}
    audit_json = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert len(audit_json["candidates"]) == 48 and audit_json["reps"] == 20


@pytest.mark.parametrize("k, n, level, verdict", [
    (0, 300, 0.1, "confirmed"),  # upper bound 0.015
    (15, 300, 0.1, "confirmed"),  # rate 0.05, upper 0.091
    (20, 300, 0.1, "inconclusive"),  # rate 0.067, upper 0.108
    (10, 100, 0.1, "inconclusive"),  # the review's case: rate 0.100, upper 0.19 (it used to pass as OK)
    (0, 20, 0.1, "inconclusive"),  # upper 0.206: 20 repetitions are too few
    (20, 100, 0.1, "failed"),  # lower 0.116 > 0.1
])
def test_verdicts_at_each_side_of_the_level(k, n, level, verdict):
    from certsel.orchestrator.audit.base import Verdict, reps_to_confirm

    lo, hi = clopper_pearson(k, n, 0.99)
    assert verdict == ("failed" if lo > level else "confirmed" if hi <= level else "inconclusive")
    assert Verdict.of(k, n, level) == verdict
    need = reps_to_confirm(k, n, level)
    if verdict == "inconclusive" and k / n < level:  # the suggested count would confirm at that rate
        assert need > n and clopper_pearson(int(np.ceil(k / n * need)), need, 0.99)[1] <= level


@pytest.mark.integration
def test_a_policy_that_peeks_fails_its_audit(tmp_path):
    """A betting strategy that looks at the observation it bets on (not predictable) certifies
    candidates above alpha far more often than delta: the audit says FAILED and exits 1."""
    (tmp_path / "peeking.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from typing import ClassVar

        import numpy as np
        from certsel.policies import BettingState, BettingStrategy, register_strategy


        @register_strategy
        @dataclass(frozen=True)
        class Peeking(BettingStrategy):
            name: ClassVar[str] = "peeking-test"

            def fractions(self, q, alpha, scale, state, *, delta, horizon):
                return np.where(q < alpha[:, None], 0.9, 0.0), BettingState(state.count + q.shape[-1])
    """))
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "quantization.yaml").read_text().replace("data/", str(EXAMPLES / "data") + "/"))
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "audit", str(job), "--reps", "50", "--no-tracking",
                        "--set", "plugins=[peeking]", "--set", "policy.betting=peeking-test", "--set", "budget.n=50",
                        "--set", "candidates=[mx_m4_r2_k16, mx_m4_r2_k64]", "--set", "policy.kind=r-eval"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED: the guarantee is violated" in p.stdout and "| failed |" in p.stdout


@pytest.mark.integration
def test_audit_rejects_live_jobs(tmp_path):
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "audit", str(EXAMPLES / "live_additions.yaml"),
                        "--no-tracking"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs a replay job" in p.stderr


def test_pairwise_audit_replays_the_job():
    """A pairwise job is audited as its ranking: each repetition is the job itself with the
    repetition's seed (its schedule, bets and epsilon), its claims are counted against the
    table's means, and the result does not depend on the number of worker processes."""
    from certsel.orchestrator.audit.pairwise import claims_checked
    from certsel.orchestrator.commands.audit import audit as ranking_audit
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    raw = {"data": {"path": str(EXAMPLES / "data" / "alpacaeval_preferences.parquet"), "candidate": "model",
                    "human": "loss"},
           "candidates": ["FuseChat-Llama-3.2-1B-Instruct", "claude", "claude-2", "gpt4_gamed"],
           "policy": {"kind": "seq"}, "procedure": "pairwise", "delta": 0.05, "budget": {"n": 300, "batch": 25},
           "pairwise": {"epsilon": 0.05}, "tracking": {"intervals": "none"}}
    cfg = parse_config(raw)
    data = load_job_data(cfg)
    one = ranking_audit(cfg, data, reps=12, seed=3, workers=1)
    two = ranking_audit(cfg, data, reps=12, seed=3, workers=2)
    assert one.rows == two.rows and one.overall == two.overall
    seeds = np.random.default_rng(3).integers(2**31, size=12)
    runs = [run_job(cfg.model_copy(update={"seed": int(sd)}), data, LocalRuntime(1), collect_labels=False)
            for sd in seeds]
    truth = data.table.true_risk
    per = np.stack([claims_checked(r.ranking, data.names, truth)[0] for r in runs])
    assert [r["ordered"] for r in one.rows] == per[:, 0].mean(axis=0).tolist()
    assert [r["tied"] for r in one.rows] == per[:, 2].mean(axis=0).tolist()
    assert one.overall["mean_tied"] == np.mean([r.ranking.pairs_tied for r in runs]) > 0  # claude ~ claude-2
    assert one.overall["evaluations_mean"] == np.mean([sum(c.n_human for c in r.records) for r in runs])
    assert one.unit == "pair" and len(one.rows) == 6 and one.overall["verdict"] == "inconclusive"
    assert one.overall["reps_to_confirm"] > 12  # 12 repetitions cannot confirm delta = 0.05
    assert one.overall["familywise_failure"] == 0.0 and one.overall["epsilon"] == 0.05
    assert "pairwise seq ranking of 4 models" in one.summary() and "| pair |" in one.table()
    with pytest.raises(ValueError, match="a ranking is audited by replaying the job's rounds"):
        audit(cfg, data, reps=12)


def test_every_kind_of_printed_claim_is_checked():
    """A made-up ranking of four models (true means 0.1, 0.2, 0.2, 0.5) with one claim of each
    kind wrong: the audit's check names each."""
    from certsel.orchestrator.audit.pairwise import claims_checked
    from certsel.orchestrator.results.ranking import Ranking, TopK

    names, truth = ["a", "b", "c", "d"], np.array([0.1, 0.2, 0.2, 0.5])

    def ranking(**kw):
        base = dict(better={"a": ["d"], "b": [], "c": [], "d": []}, better_direct={}, possible_winners=[], goal="ranking",
                    order=names, score={}, score_meaning="", pairs_certified=1, pairs_certified_directly=1, pairs=6,
                    pair_delta=0.01, pair_delta_per_direction=0.005, items_per_pair={"a vs b": 10},
                    difference_intervals={"a - d": [-0.5, -0.3]}, epsilon=0.05, tied=["b ~ c"],
                    rank_intervals={"a": [1, 1], "b": [2, 3], "c": [2, 3], "d": [4, 4]},
                    rank_groups=[["a"], ["b", "c"], ["d"]])
        return Ranking(**{**base, **kw})

    right, extra = claims_checked(ranking(), names, truth)
    assert right[0].tolist() == [0, 0, 1, 0, 0, 0] and right[1].sum() == 0  # a < d, in order
    assert right[2].tolist() == [0, 0, 0, 1, 0, 0] and right[3].sum() == 0  # b ~ c, exactly tied
    assert right[4, 0] == 10 and right[5, 2] == 1  # a - d = -0.4 lies in [-0.5, -0.3]
    assert not any(extra["interval_missed"].values()) and not extra["group_wrong"] and not extra["topk_wrong"]
    wrong, extra = claims_checked(ranking(better={"a": [], "b": ["c"], "c": [], "d": []}, tied=["a ~ b"],
                                          difference_intervals={"a - d": [-0.3, -0.1]},
                                          rank_intervals={"a": [2, 4], "b": [2, 2], "c": [2, 3], "d": [4, 4]},
                                          rank_groups=[["a", "b"], ["c"], ["d"]],
                                          topk=TopK(k=1, certified_in=["b"], certified_out=["a"], undetermined=[])),
                                  names, truth)
    assert wrong[1].tolist() == [0, 0, 0, 1, 0, 0]  # b better than c: an exact tie, so wrong
    assert wrong[3].tolist() == [1, 0, 0, 0, 0, 0]  # a ~ b within 0.05: they are 0.1 apart
    assert wrong[5, 2] == 0  # -0.4 is outside [-0.3, -0.1]
    assert extra["interval_missed"] == {"a": True, "b": False, "c": False, "d": False}
    assert extra["group_wrong"] and extra["topk_wrong"]


@pytest.mark.slow
def test_a_tie_at_the_boundary_is_audited_within_delta():
    """Three models 0.05 apart on a 1,000-item table, with epsilon = 0.05: every tie the ranking
    could claim is false (|Delta| = epsilon exactly), the boundary of the tie's test. Audited
    over 200 repetitions, false ties and wrong orders stay within delta (99% Clopper-Pearson),
    and so does each pair's rate within its level's bound."""
    import tempfile

    from certsel.orchestrator.commands.audit import audit as ranking_audit
    from helpers.boundary import shifted_table

    n = 1000
    with tempfile.TemporaryDirectory() as tmp:
        path = shifted_table(pathlib.Path(tmp) / "t.parquet", {"b": 50, "c": 100}, n)
        cfg = parse_config({"data": {"path": str(path), "candidate": "model", "human": "loss"},
                            "policy": {"kind": "seq"}, "procedure": "pairwise", "delta": 0.1,
                            "pairwise": {"goal": "ranking", "epsilon": 0.05}, "budget": {"n": n, "batch": 50},
                            "tracking": {"intervals": "none"}})
        data = load_job_data(cfg)
        assert np.diff(data.table.true_risk).tolist() == pytest.approx([0.05, 0.05])
        res = ranking_audit(cfg, data, reps=200, seed=1, workers=2)
    o = res.overall
    assert clopper_pearson(round(o["familywise_failure"] * 200), 200, 0.99)[0] <= cfg.delta
    assert o["verdict"] != "failed" and all(r["verdict"] != "failed" for r in res.rows)
    assert o["mean_certified"] >= 1  # a vs c, 0.1 apart, is ordered: the job is not idle
    assert "false tie" in res.table()


@pytest.mark.slow
def test_the_bundled_ranking_example_orders_no_pair_wrongly():
    """The ranking example as it ships (12 models, 66 pairs, delta = 0.05, Cer-Eval pairs
    here replaced by Seq's), audited as the ranking: no wrong claim of any kind in a
    repetition beyond delta; docs/reliability.md has the 200-repetition table."""
    from certsel.config import load_config
    from certsel.orchestrator.commands.audit import audit as ranking_audit

    cfg = load_config(EXAMPLES / "alpacaeval_ranking.yaml", ["policy.kind=seq", "pairwise.epsilon=0.05"])
    res = ranking_audit(cfg, load_job_data(cfg), reps=24, seed=5, workers=2)
    o = res.overall
    assert o["procedure"] == "pairwise" and res.unit == "pair" and len(res.rows) == 66
    assert o["familywise_failure"] <= cfg.delta and o["verdict"] != "failed"
    assert o["wrong_order_rate"] == o["false_tie_rate"] == o["rank_interval_miss_rate"] == 0
    assert 0 < o["saved_fraction"] < 1 and o["mean_certified"] > 30 and o["mean_tied"] > 15


def test_the_audit_plot_names_its_candidates_and_keeps_its_whole_title():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from certsel.config import parse_config
    from certsel.orchestrator.audit.base import AuditResult
    from certsel.orchestrator.audit.job_audit import _audit_figure

    cfg = parse_config({"data": {"path": str(EXAMPLES / "data" / "triviaqa_llama31_8b_mx.parquet"),
                                 "judge": "loss_judge_best", "order": "rank"}})
    names = [f"a-rather-long-candidate-name-{k}" for k in range(30)]
    rows = [{"candidate": n, "failure": 0.01 if k % 2 else None, "failure_upper": 0.03 if k % 2 else None,
             "level": 0.1, "coverage": 0.97, "verdict": "confirmed" if k % 2 else None, "true_risk": 0.1}
            for k, n in enumerate(names)]
    overall = {"procedure": "fst", "familywise_failure": 0.0, "failure_upper": 0.005, "verdict": "confirmed",
               "reps_to_confirm": None}
    result = AuditResult(cfg, 1000, rows, overall)
    fig = _audit_figure(result, plt)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == names[::-1] or ticks == names  # every candidate named, top to bottom in table order
    title = fig._suptitle.get_text().replace("\n", " ")
    assert title == result.summary()  # wrapped, never cut
    plt.close(fig)


@pytest.mark.unit
@pytest.mark.parametrize("sampling", ["iid", "without-replacement"])
def test_repetitions_with_job_seeds_replay_the_jobs_own_draws(sampling):
    """betting_repetitions(seeds=...) draws, in repetition i, the items a job with seed
    seeds[i] labels: its max log e-values equal the engine's for that job (every candidate to
    its whole budget), and two tasks sharing a seed, as a multi-task job's do, share the
    order (the multi-task audit replays that coupling). Without replacement too: the
    judge-only items' own order and the finite-population observations are the engine's."""
    from certsel.orchestrator.audit.job_audit import betting_repetitions
    from certsel.orchestrator.audit.tasks_audit import task_repetitions
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job

    data_path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "prompts_sentiment.parquet"
    raw = {"data": {"path": str(data_path), "judge": "loss_judge_icl5"}, "alpha": 0.3, "delta": 0.1,
           "candidates": ["prompt_000", "prompt_004", "prompt_008"],
           "policy": {"kind": "r-autoeval+", "sampling": sampling},
           "procedure": "bonferroni", "objective": {"column": "prompt_len"},
           "budget": {"n": 60, "r": 2, "batch": 60}, "scheduling": {"mode": "full"}}
    seeds = np.array([3, 11])
    cfg = parse_config(raw)
    data = load_job_data(cfg)
    audited = betting_repetitions(cfg, data.table, data.table.true_risk, 2, None, seeds=seeds)[0]
    for i, s in enumerate(seeds):
        res = run_job(parse_config({**raw, "seed": int(s)}), data, LocalRuntime(1), collect_labels=False)
        np.testing.assert_allclose(np.maximum(audited[i], 0.0), [max(r.max_log_e, 0.0) for r in res.records],
                                   atol=1e-9)
    twice = [task_repetitions(cfg, data, seeds) for _ in range(2)]
    np.testing.assert_array_equal(twice[0], twice[1])
    other = task_repetitions(cfg, data, seeds + 1)
    assert not np.array_equal(other, twice[0])
