"""MarginBet: bet sizes for a test's claims, checked against a loop, a literal capital process and
a simulation of the bounds' coverage with the bets a ranking's pairs use."""

import math

import numpy as np
import pytest

from certsel.orchestrator.audit.base import clopper_pearson
from certsel.policies.pair_bets import MarginBet, pair_claims
from certsel.policies.seq_bank import SeqBank


def _sizes_by_loop(bet, mean, stderr, v):
    out = np.zeros((2,) + v.shape)
    for r in range(v.shape[0]):
        best, best_margin = None, -math.inf
        for lo, hi in bet.claims:  # the first claim with the widest margin, as argmax picks
            margin = min(mean[r] - lo, hi - mean[r])
            if margin > best_margin:
                best, best_margin = (lo, hi), margin
        floor = max(stderr[r], 1e-3)
        d_lo, d_hi = max(mean[r] - best[0], floor), max(best[1] - mean[r], floor)
        if math.isinf(best[0]):
            d_lo = d_hi
        if math.isinf(best[1]):
            d_hi = d_lo
        for t in range(v.shape[1]):
            out[0, r, t] = d_lo / (v[r, t] + d_lo ** 2)
            out[1, r, t] = d_hi / (v[r, t] + d_hi ** 2)
    return out


@pytest.mark.parametrize("epsilon", [None, 0.05, 0.3])
def test_sizes_agree_with_a_loop(epsilon):
    rng = np.random.default_rng(1)
    bet = MarginBet(pair_claims(epsilon))
    mean = np.concatenate([rng.uniform(0.3, 0.7, 40), [0.5, 0.5 + (epsilon or 0.1) / 2, 0.475]])
    stderr = rng.uniform(0.0, 0.05, mean.size)
    v = rng.uniform(1e-3, 0.05, (mean.size, 6))
    got = np.stack(bet.sizes(mean, stderr, v))
    assert np.allclose(got, _sizes_by_loop(bet, mean, stderr, v), rtol=1e-12, atol=0)
    assert np.all(got > 0)


def test_a_tie_claim_bets_both_gamblers_for_their_own_ends():
    """At a mean of 0.51 with epsilon 0.1 the tie (0.45, 0.55) has the widest margin (0.04, against
    0.01 for "> 1/2"): K+ bets for 0.06 to its end, K- for 0.04 to its own."""
    bet = MarginBet(pair_claims(0.1))
    lp, lm = bet.sizes(np.array([0.51]), np.array([0.0]), np.array([[0.01]]))
    assert lp[0, 0] == pytest.approx(0.06 / (0.01 + 0.06 ** 2)) and lm[0, 0] == pytest.approx(0.04 / (0.01 + 0.04 ** 2))


@pytest.mark.parametrize("claims, message", [
    ((), "at least one claim"),
    (((0.5, 0.4),), "lo < hi"),
    (((-math.inf, math.inf),), "one end finite"),
    (((math.nan, 0.5),), "lo < hi"),
])
def test_bad_claims_are_refused(claims, message):
    with pytest.raises(ValueError, match=message) as err:
        MarginBet(claims)
    assert "\n" not in str(err.value)


def test_bad_caps_and_bets_are_refused():
    from certsel.policies.confseq import BettingCS

    with pytest.raises(ValueError, match="cap must be in \\(0, 1\\)"):
        MarginBet(pair_claims(None), cap=1.0)
    cs = BettingCS(1, delta=0.1)
    one = np.ones((1, 2))
    with pytest.raises(ValueError, match="bets must have shape \\(2, 1, 2\\)"):
        cs.update(one / 2, 0 * one, one, one / 10, bets=np.ones((1, 2)))
    with pytest.raises(ValueError, match="bet sizes must be finite and non-negative"):
        cs.update(one / 2, 0 * one, one, one / 10, bets=-np.ones((2, 1, 2)))


def _literal_capital(y, a, b, lam, m, cap, sign):
    """max over time of K+ (sign +1) or K- (sign -1) at the mean m, one factor at a time."""
    log_k, best = 0.0, 0.0
    for t in range(y.size):
        room = (m - a[t]) if sign > 0 else (b[t] - m)
        size = min(lam[t], cap / room) if room > 0 else lam[t]
        log_k += math.log1p(sign * size * (y[t] - m))
        best = max(best, log_k)
    return best


def test_every_reported_bound_is_rejected_by_the_literal_capital():
    """Rows of a margin-betting bank fed in uneven batches (its grids rebuilt on the way): each
    one-sided bound it reports is a mean that the literal K+ / K- over the stored observations
    and bets rejected at some time (or the bound known for certain from the labelled part)."""
    rng = np.random.default_rng(4)
    B, N, delta = 6, 400, 0.01
    values = np.where(rng.random((B, N)) < 0.7, 0.5, (rng.random((B, N)) < rng.uniform(0.3, 0.7, (B, 1))) * 1.0)
    bank = SeqBank(N, B, delta=delta, threshold=0.5, seed=2, bet=MarginBet(pair_claims(0.1)))
    for size in (25, 25, 5, 40, 60, 100):
        rows = np.flatnonzero(~bank.done)
        if rows.size:
            bank.feed(rows, values[rows][:, bank.next_items(int(rows[0]), size)])
    row = 3  # mean 0.494: inside the tie, whose two ends lie at different margins
    (members, cs), *_ = [c for c in bank._cohorts if row in c[0]]
    h = cs.history()
    r = int(np.flatnonzero(members == row)[0])
    assert cs._grid[r, 0] > 0 and not np.array_equal(h[3], h[4])  # grid rebuilt; the gamblers bet differently
    y, a, b, lam_p, lam_m = h[:, r]
    lower, upper = bank.bounds()[row, :2]
    n = int(bank.n_labeled[row])
    labelled = values[row][bank.order[:n]]
    known_lo, known_hi = labelled.sum() / N, (labelled.sum() + N - n) / N
    thr = math.log(1 / delta)
    assert lower <= known_lo + 1e-9 or _literal_capital(y, a, b, lam_p, lower, cs.cap, +1) >= thr - 1e-9
    assert upper >= known_hi - 1e-9 or _literal_capital(y, a, b, lam_m, upper, cs.cap, -1) >= thr - 1e-9
    assert lower > 0 and upper < 1  # the bounds moved


@pytest.mark.slow
def test_margin_bets_keep_the_bounds_at_the_boundary():
    """2,000 runs (bank rows, each its own shuffle of one 300-item table) of a pair whose table
    mean sits exactly on the tie's end (u = 0.5 + epsilon / 2, mostly 1/2 like a near-tie): the
    one-sided bounds at delta = 0.05 each exclude the mean in at most delta of the runs, and
    the runs that would claim a tie stay below delta."""
    rng = np.random.default_rng(11)
    N, runs, delta, eps = 300, 2000, 0.05, 0.1
    table = np.full(N, 0.5)
    table[:30] = 1.0  # mean 0.5 + 30 * 0.5 / 300 = 0.55 = 0.5 + eps / 2
    mu = table.mean()
    assert mu == pytest.approx(0.5 + eps / 2)
    values = np.stack([table[rng.permutation(N)] for _ in range(runs)])
    bank = SeqBank(N, runs, delta=delta, threshold=0.5, seed=0, bet=MarginBet(pair_claims(eps)))
    low_miss = np.zeros(runs, dtype=bool)
    high_miss = np.zeros(runs, dtype=bool)
    while (rows := np.flatnonzero(~bank.done)).size:  # every running row has been fed equally far
        bank.feed(rows, values[rows][:, bank.next_items(int(rows[0]), 10)])
        b = bank.bounds()
        low_miss |= b[:, 0] > mu + 1e-12
        high_miss |= b[:, 1] < mu - 1e-12
    for miss in (low_miss, high_miss):
        assert clopper_pearson(int(miss.sum()), runs, 0.99)[0] <= delta, miss.sum()
