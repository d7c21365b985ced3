"""The oracle's labels to end a candidate it cannot certify (policies/limits.py, stop_limit): against a literal
computation on Bernoulli losses (a grid search for the risk the budget certifies easily, the Bernoulli divergence), its
edges, and checked to be a lower bound: on simulated candidates the budget stop ends, and in jobs, where the labels
spent on the candidate never fall below it."""

import math

import numpy as np
import pytest

from certsel.policies.budget_stop import Growth, stops
from certsel.policies.limits import bernoulli_kl, kl_inf, stop_limit


def _literal(p: float, alpha: float, delta: float, budget: int, gamma: float) -> float:
    """Bernoulli(p) losses: the risk a in a fine grid whose moved losses {-(p - a), 1 - (p - a)} (weights 1 - p, p)
    reach the limit log(1/delta) / KL_inf in half the budget, then kl(1/2, gamma) / kl(p, a), by brute force."""
    grid = np.linspace(-0.5, alpha - 1e-6, 20001)
    best = None
    for a in grid:
        lo, hi = a - p, 1.0 + a - p  # the moved support
        y_lo, y_hi = (lo - alpha) / (1.0 + max(a - p, 0) - alpha), (hi - alpha) / (1.0 + max(a - p, 0) - alpha)
        us = np.linspace(0.0, 1.0, 2001)
        with np.errstate(divide="ignore", invalid="ignore"):
            growth = np.nanmax((1 - p) * np.log1p(-us * y_lo) + p * np.log1p(-us * y_hi))
        if growth > 0 and math.log(1 / delta) / growth <= budget / 2:
            best = a
    return min(bernoulli_kl(0.5, gamma) / bernoulli_kl(p, best), budget)


@pytest.mark.parametrize("p", [0.1, 0.12, 0.2])
def test_it_equals_the_literal_computation_on_bernoulli_losses(p):
    x = np.r_[np.ones(int(round(p * 1000))), np.zeros(1000 - int(round(p * 1000)))]
    got = stop_limit(x, 0.1, 0.1, 300, 0.2)
    assert got == pytest.approx(_literal(p, 0.1, 0.1, 300, 0.2), rel=2e-3)


def test_the_mirrored_divergence_is_the_bernoulli_one():
    """KL_inf^- of Bernoulli(p) to mean a <= p above 0: kl(p, a) (the closest law keeps the two points)."""
    x = np.r_[np.ones(30), np.zeros(70)]
    for a in (0.05, 0.1, 0.25):
        assert kl_inf(-x, -a, 0.0)[0] == pytest.approx(bernoulli_kl(0.3, a), rel=1e-6)


def test_edges():
    x = np.r_[np.ones(5), np.zeros(95)]  # mean 0.05: looks certifiable in half the budget
    assert math.isinf(stop_limit(x, 0.1, 0.1, 300, 0.2))
    assert math.isnan(stop_limit(np.ones(10), 0.1, 0.1, 300, 0.5))  # gamma >= 1/2 asks for no information
    assert stop_limit(np.r_[np.ones(11), np.zeros(89)], 0.1, 0.1, 300, 1e-100) == 300  # capped at the budget
    with pytest.raises(ValueError, match="gamma"):
        stop_limit(x, 0.1, 0.1, 300, 1.5)
    with pytest.raises(ValueError):
        stop_limit(np.zeros(0), 0.1, 0.1, 300, 0.2)
    # more caution (smaller gamma) and a larger gap to alpha cost more and fewer labels, as kl says
    y = np.r_[np.ones(12), np.zeros(88)]
    assert stop_limit(y, 0.1, 0.1, 300, 0.05) > stop_limit(y, 0.1, 0.1, 300, 0.2)
    assert stop_limit(np.r_[np.ones(30), np.zeros(70)], 0.1, 0.1, 300, 0.2) < stop_limit(y, 0.1, 0.1, 300, 0.2)


@pytest.mark.parametrize("risk", [0.1, 0.12, 0.15])
def test_the_budget_stop_spends_at_least_the_limit(risk):
    """R-Eval's e-process on Bernoulli(risk) losses, alpha 0.1, 300 labels, the budget stop at 0.2 checked every 25
    labels: the mean labels to end a candidate (stopped, certified or out of budget) is above the limit."""
    from certsel.policies import log_evalue_paths

    rng = np.random.default_rng(int(risk * 1000))
    reps, n, gamma = 200, 300, 0.2
    human = (rng.random((reps, n)) < risk).astype(float)
    paths = log_evalue_paths(human, alpha=0.1, delta=0.1, rhos=[0.0], horizon=n)
    c = math.log(10)
    ended = np.full(reps, n)
    for i in range(reps):
        for t in range(25, n, 25):
            if paths[i, :t].max() >= c or stops(Growth.of(paths[i, :t]), paths[i, t - 1], c, n - t, gamma):
                ended[i] = t
                break
    truth = (rng.random(200_000) < risk).astype(float)
    assert ended.mean() >= stop_limit(truth, 0.1, 0.1, n, gamma)


def test_kl_inf_is_the_maximum_scipys_bounded_minimiser_finds():
    """kl_inf's maximiser (a bisection on the concave growth's slope) against scipy's bounded minimiser of the same
    growth, on losses with atoms at the top (a slope of -inf at the cap), continuous losses, and optima at the cap."""
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(5)
    samples = [rng.random(400) < 0.05, rng.random(400) < 0.09, rng.beta(0.5, 4.0, 300), rng.random(50) * 0.2,
               np.r_[np.zeros(99), 1.0], np.zeros(20)]
    for x in samples:
        for alpha, upper in ((0.1, 1.0), (0.15, 1.0), (0.1, 1.5)):
            x = np.asarray(x, dtype=float)
            growth, u = kl_inf(x, alpha, upper)
            y = (x - alpha) / (upper - alpha)
            with np.errstate(divide="ignore"):
                res = minimize_scalar(lambda v: -np.mean(np.log1p(-v * y)), bounds=(0.0, 1.0), method="bounded",
                                      options={"xatol": 1e-12})
                at_cap = float(np.mean(np.log1p(-y)))
            assert growth == pytest.approx(max(-res.fun, at_cap, 0.0), rel=1e-9, abs=1e-15)
            assert 0.0 <= u <= 1.0
