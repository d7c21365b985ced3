"""engine/derived.py: the statistics a finished job's outputs print, computed once. Here the
job's labels against the oracle's estimate, recomputed independently from the label log."""

import pathlib

import numpy as np
import pytest
from certsel.config import load_config
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.outputs.cells import oracle_line
from certsel.orchestrator.outputs.certificate import certificate
from certsel.orchestrator.outputs.report import _html, _markdown
from certsel.policies.budget_stop import DEFAULT_LEVEL
from certsel.policies.limits import label_limit, ppi_limit, stop_limit

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _run(name, sets):
    cfg = load_config(EXAMPLES / name, sets)
    return run_job(cfg, load_job_data(cfg), LocalRuntime(1))


@pytest.mark.slow
@pytest.mark.parametrize("sets", [["policy.kind=r-eval", "budget.n=200"], ["budget.n=200", "procedure=holm"]])
def test_labels_against_the_oracle_count_the_certified_candidates_minimums(sets):
    res = _run("quantization.yaml", sets)
    cfg, o = res.cfg, res.oracle
    assert res.certified and o is not None
    expect = 0.0
    for rec in res.records:
        if rec.name not in res.certified:
            continue
        rows = res.labels[rec.name]
        h = rows.loss[rows.role == "human"]
        level = res.levels[rec.index]
        if cfg.policy.uses_judge:  # the floor with the judge's mean from every judge label bought
            jl = rows.loss[rows.role == "judge"]
            items = rows.item[rows.role == "judge"]
            paired = jl[np.isin(items, rows.item[rows.role == "human"])]
            need = ppi_limit(h, paired, cfg.alpha, level, judge_mean=float(jl.mean())).labels
        else:
            need = label_limit(h, cfg.alpha, level)
        expect += need
    # a fixed sequence: the first candidate it tested and did not certify, with the labels any procedure needs to end it
    first = next((r for r in res.records if r.t and r.name not in res.certified), None)
    if cfg.proc.needs_order and first is not None:
        h = res.labels[first.name].loss[res.labels[first.name].role == "human"]
        gamma = cfg.scheduling.budget_stop or DEFAULT_LEVEL
        stop = stop_limit(h, cfg.alpha, res.levels[first.index], cfg.budget.n, gamma)
        assert o.stopped == first.name and o.stop == pytest.approx(stop, rel=1e-9) and 0 < stop <= first.n_human
        expect += stop
    else:
        assert o.stopped is None and o.stop == 0
    assert o.candidates == len(res.certified)
    assert o.labels == sum(r.n_human for r in res.records) == res.spent["human"]
    assert o.oracle == pytest.approx(expect, rel=1e-9)
    block = certificate(res).labels.oracle
    assert block.ratio == pytest.approx(o.labels / o.oracle, abs=1e-3) and block.ratio > 1
    line = oracle_line(block)
    assert line.startswith(f"labels used / oracle estimate: {o.labels:,} / ")
    assert line in _markdown(certificate(res), []) and line in _html(certificate(res), [])


def test_the_ranking_oracle_on_the_whole_table_is_the_documented_limit():
    """ranking_need on AlpacaEval's full table (each pair at delta / (K (K - 1)) per direction,
    delta = 0.05): the oracle's evaluations docs/driver.md gives, 8432, 6933 and 4292 of 9660."""
    from certsel.policies.ranking_limit import ranking_need, table_moments
    from certsel.workers.replay import load_loss_table

    t = load_loss_table(EXAMPLES / "data" / "alpacaeval_preferences.parquet", human="loss", judge=None,
                        candidate="model", order=None, objective=None)
    K, N = t.human.shape
    got = [int(ranking_need(*table_moments(t.human), N, 0.05 / (K * (K - 1)), e).sum()) for e in (None, 0.02, 0.05)]
    assert got == [8432, 6933, 4292] and K * N == 9660


def _need_by_loop(means, gaps, sds, N, level, epsilon):
    """The oracle's rule one pair at a time: model a settles (a, b) itself (the cheaper of an
    order and a tie) or orders itself against a model strictly between a and b."""
    from scipy.stats import norm

    z = norm.ppf(1 - level)

    def items(margin, s):
        for n in range(1, N + 1):
            if margin > 0 and z * s * np.sqrt((N - n) / (N - 1) / n) <= margin:
                return n
        return N

    K = means.size
    need = np.zeros(K, dtype=np.int64)
    for a in range(K):
        for b in range(K):
            if a == b:
                continue
            order = items(gaps[a, b], sds[a, b]) if means[a] != means[b] else N
            tie = items(epsilon - gaps[a, b], sds[a, b]) if epsilon else N
            cost = min(order, tie)
            for c in range(K):
                if min(means[a], means[b]) < means[c] < max(means[a], means[b]):
                    cost = min(cost, items(gaps[a, c], sds[a, c]))
            need[a] = max(need[a], cost)
    return need


@pytest.mark.parametrize("epsilon", [None, 0.05, 0.2])
def test_the_ranking_oracle_agrees_with_a_loop(epsilon):
    """ranking_need, vectorised, against the rule written as a loop on random 0/1 tables with
    exact ties (two models share a loss column) and models that no pair can order."""
    from certsel.policies.ranking_limit import ranking_need, table_moments

    rng = np.random.default_rng(7)
    for _ in range(5):
        K, N = 7, 60
        losses = (rng.random((K, N)) < rng.uniform(0.1, 0.9, (K, 1))).astype(float)
        losses[3] = losses[1][rng.permutation(N)]  # the same mean: an exact tie
        moments = table_moments(losses)
        got = ranking_need(*moments, N, 0.01, epsilon)
        assert np.array_equal(got, _need_by_loop(*moments, N, 0.01, epsilon))


@pytest.mark.slow
def test_a_full_rankings_labels_against_the_oracle():
    """A ranking job's oracle: the pair moments over the items both models labelled, recomputed
    here by a loop, through ranking_need at the job's level and epsilon."""
    from certsel.policies.ranking_limit import ranking_need

    res = _run("alpacaeval_ranking.yaml", ["pairwise.epsilon=0.05"])
    rk, o = res.ranking, res.oracle
    names = [r.name for r in res.records]
    K = len(names)
    means, gaps, sds = np.zeros(K), np.zeros((K, K)), np.full((K, K), 0.5)
    lab = {m: dict(zip(res.labels[m].item[res.labels[m].role == "human"].tolist(),
                       res.labels[m].loss[res.labels[m].role == "human"].tolist(), strict=True)) for m in names}
    for a, ma in enumerate(names):
        means[a] = np.mean(list(lab[ma].values()))
        for b, mb in enumerate(names):
            shared = sorted(set(lab[ma]) & set(lab[mb]))
            if a != b and len(shared) >= 2:
                d = np.array([lab[ma][i] - lab[mb][i] for i in shared])
                gaps[a, b], sds[a, b] = abs(d.mean()), d.std()
    expect = ranking_need(means, gaps, sds, res.data.n_items, rk.pair_delta_per_direction, 0.05).sum()
    assert o.basis == "ranking" and o.candidates == K and o.oracle == expect
    assert o.labels == sum(r.n_human for r in res.records)
    assert "full ranking of the 12 models" in oracle_line(certificate(res).labels.oracle)


@pytest.mark.slow
def test_no_oracle_estimate_without_a_testing_certificate():
    assert _run("alpacaeval_ranking.yaml", ["budget.n=100", "pairwise.goal=best"]).oracle is None  # not a ranking
    nothing = _run("quantization.yaml", ["alpha=0.001", "budget.n=50"])
    assert not nothing.certified and nothing.oracle is None
    assert certificate(nothing).labels.oracle is None and "oracle" not in certificate(nothing).as_json()["labels"]
