"""Sign tests of model pairs on real AlpacaEval losses (the vectorised reference of
tests/helpers/sign_tests.py), and the ranking's pair logic (policies/comparison.py)."""

import numpy as np
import pytest
from scipy.stats import binom

from helpers.sign_tests import paired_losses, sign_test_paths

pytestmark = pytest.mark.slow  # error-rate simulations


def _pair(alpaca, a, b):
    return alpaca.losses[alpaca.models.index(a)], alpaca.losses[alpaca.models.index(b)]


@pytest.mark.parametrize("method,radius", [("betting", "betting"), ("seq", "betting")])
def test_clear_pair_stops_early_with_the_right_sign(alpaca, method, radius):
    # mean losses 0.701 vs 0.830: a gap of 0.129 > 0.1
    a, b = _pair(alpaca, "FuseChat-Llama-3.2-1B-Instruct", "claude")
    assert b.mean() - a.mean() > 0.1
    u = paired_losses(a, b)
    rng = np.random.default_rng(0)
    perms = np.argsort(rng.random((200, u.size)), axis=1)
    res = sign_test_paths(u[perms], delta=0.05, method=method, radius=radius)
    assert np.mean(res.winner == 1) >= 0.95  # correct sign in >= 1 - delta of shuffles
    assert np.all(res.winner != -1)
    assert np.median(res.n_used) < 805 / 3  # well before the end of the test set


def test_paper_seq_needs_a_larger_gap(alpaca):
    # the Hoeffding radius ignores the variance: a 0.13 gap is never certified on 805 items,
    # a 0.26 gap is, later than with betting
    order = np.random.default_rng(0).permutation(805)

    def sign(a, b, **kw):
        return sign_test_paths(paired_losses(a, b)[order], delta=0.05, **kw)

    a, b = _pair(alpaca, "FuseChat-Llama-3.2-1B-Instruct", "claude")
    assert sign(a, b, method="seq", radius="paper").winner == 0
    a, c = _pair(alpaca, "FuseChat-Llama-3.2-1B-Instruct", "gpt4_gamed")
    paper, bet = sign(a, c, method="seq", radius="paper"), sign(a, c, method="betting")
    assert paper.winner == bet.winner == 1 and bet.n_used < paper.n_used < 805


def null_pair_winners(alpaca, method: str, reps: int, delta: float = 0.1) -> int:
    """How many of ``reps`` uniformly shuffled orders of an exact null pair certify a winner.
    An exact null on the test set and in the population: every item appears twice, once
    with the two models' losses swapped, so the mean of d is 0 over the 800 items and
    E[d] = 0 under uniform draws. Shared with benchmarks/validity_simulations.py (1,000
    orders)."""
    a, b = _pair(alpaca, "claude", "claude-2")
    a, b = a[:400], b[:400]
    x, y = np.r_[a, b], np.r_[b, a]
    rng = np.random.default_rng(1)
    perms = np.argsort(rng.random((reps, x.size)), axis=1)
    u = (x[perms] - y[perms] + 1) / 2
    res = sign_test_paths(u, delta=delta, method=method)
    return int(np.sum(res.winner != 0))


@pytest.mark.parametrize("method", ["betting", "seq"])
def test_null_pairs_certify_a_winner_at_most_delta(alpaca, method):
    """250 orders of an exact null pair certify a winner in at most delta of them, within the
    99% binomial ceiling (37 of 250; a true rate of 2 delta fails with probability 0.98)."""
    reps, delta = 250, 0.1
    winners = null_pair_winners(alpaca, method, reps, delta)
    assert winners <= binom.ppf(0.99, reps, delta), winners / reps
    # identical inputs: u = 1/2 exactly, never certified
    same = sign_test_paths(np.full((10, 805), 0.5), delta=delta, method=method)
    assert np.all(same.winner == 0)


def test_sign_test_bad_input(alpaca):
    a = alpaca.losses[0]
    with pytest.raises(ValueError, match="same items"):
        paired_losses(a, a[:-1])
    with pytest.raises(ValueError, match="outside"):
        paired_losses(a, a + 1.5)
    with pytest.raises(ValueError, match="method"):
        sign_test_paths(paired_losses(a, a), delta=0.05, method="vote")


def test_implied_orders_and_the_pairs_each_goal_needs():
    """Certified orders a < b and b < c imply a < c (valid on the same simultaneous event);
    'ranking' drops pairs whose order is implied, 'best' keeps only pairs between models no
    other model is certified better than."""
    from certsel.policies.comparison import implied_orders, pairs_needed, possible_winners

    K = 4
    better = np.zeros((K, K), dtype=bool)
    better[0, 1] = better[1, 2] = True  # 0 < 1 < 2, model 3 unrelated
    closure = implied_orders(better)
    assert closure[0, 2] and not closure[2, 0] and closure.sum() == 3
    assert possible_winners(closure).tolist() == [True, False, False, True]
    ii, jj = np.triu_indices(K, 1)  # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    assert pairs_needed("all", closure, ii, jj).all()
    assert pairs_needed("ranking", closure, ii, jj).tolist() == [False, False, True, False, True, True]
    assert pairs_needed("best", closure, ii, jj).tolist() == [False, False, True, False, False, False]
    alive = np.array([True, True, True, False])
    assert not pairs_needed("best", closure, ii, jj, alive).any()
