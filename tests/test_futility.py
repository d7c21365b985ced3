"""Futility stops: a candidate whose mirrored e-process certifies R >= alpha stops as hopeless.
It never certifies anything, so the family-wise error is that of the job without futility;
a candidate with R <= alpha is stopped with probability at most delta_f."""

import pathlib

import numpy as np
from certsel.config import load_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.policies import log_evalue_paths, scheme_rhos
from scipy import stats
from helpers.simulate import bernoulli
import pytest

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_a_good_candidate_is_stopped_at_most_delta_f():
    """At the boundary R = alpha (the hardest good candidate) the futility e-process is a
    martingale: over 2,000 runs it reaches 1/delta_f at most delta_f of the time."""
    rng = np.random.default_rng(21)
    reps, n, r, alpha, delta_f = 2000, 200, 4, 0.2, 0.05
    h, jl, ju = bernoulli(rng, reps, n, r * n, alpha, flip=0.1)
    mirrored = log_evalue_paths(1 - h, 1 - jl, 1 - ju, alpha=1 - alpha, delta=delta_f,
                                rhos=scheme_rhos("r-autoeval+"), horizon=n)
    stopped = (mirrored.max(-1) >= np.log(1 / delta_f)).sum()
    assert stopped <= stats.binom.ppf(0.99, reps, delta_f)
    # and it has power: at R = 0.35 it stops most runs well before the budget
    h, jl, ju = bernoulli(rng, 200, n, r * n, 0.35, flip=0.1)
    far = log_evalue_paths(1 - h, 1 - jl, 1 - ju, alpha=1 - alpha, delta=delta_f, horizon=n)
    first = np.where((far >= np.log(1 / delta_f)).any(-1), (far >= np.log(1 / delta_f)).argmax(-1) + 1, n + 1)
    assert np.median(first) < n / 2


def test_futility_through_the_driver(ray_session):
    """The prompt-template example (Bonferroni over 25 templates) with and without futility:
    the certified set with futility is within the one without, stopped templates are
    "futile" with their risk above alpha on the table, and they spent fewer labels."""
    off = ["scheduling.prune=false", "tracking.intervals=none", "scheduling.budget_stop=null"]  # futility alone
    cfg = load_config(EXAMPLES / "prompts.yaml", [*off, "scheduling.futility=null"])
    fut = load_config(EXAMPLES / "prompts.yaml", [*off, "scheduling.futility=0.05"])
    data = load_job_data(cfg)
    rt = RayRuntime()
    try:
        base = run_job(cfg, data, rt, collect_labels=False)
        res = run_job(fut, data, rt, collect_labels=False)
    finally:
        rt.close()
    assert set(res.certified) <= set(base.certified) and res.selected == base.selected
    futile = [r for r in res.records if r.status == "futile"]
    assert futile and all(r.true_risk > cfg.alpha for r in futile)
    assert all(r.t < cfg.budget.n for r in futile) and all(r.max_log_futility >= np.log(20) for r in futile)
    failing = [k for k, r in enumerate(base.records) if r.true_risk > cfg.alpha]
    spent = sum(res.records[k].n_human for k in failing)
    assert spent < 0.6 * sum(base.records[k].n_human for k in failing)
    # the e-values of the test itself are untouched
    for a, b in zip(base.records, res.records, strict=True):
        np.testing.assert_allclose(b.path, a.path[: len(b.path)], atol=1e-12)
