"""Recovery certificates (policies/recovery.py): Rec = E[s] / E[s_ref] >= r as a risk test on
l = (r s_ref - s + 1) / (1 + r) at alpha_r = 1 / (1 + r), and the lower bound that inverts it."""

import math

import numpy as np
import pytest
from scipy import stats

from certsel.policies import certify
from certsel.policies.autoeval import decision_fractions, effective_observations, log_evalue_paths
from certsel.policies.recovery import Recovery, recovery_lower_bound, recovery_of
from certsel.workers.replay import load_loss_table

DELTA = 0.1


def paired(rng, reps, n, p_ref, recovery):
    """Binary scores: the reference right with probability p_ref, the candidate right on a share
    ``recovery`` of those items (so E[s] / E[s_ref] = recovery exactly)."""
    ref = (rng.random((reps, n)) < p_ref).astype(float)
    return ref * (rng.random((reps, n)) < recovery), ref


def r_eval(s, ref, r, n):
    """R-Eval on the recovery losses: log e-value paths and the bet fractions of its test."""
    rec = Recovery(r)
    losses = rec.losses(s, ref)
    log_e = log_evalue_paths(losses, alpha=rec.alpha, delta=DELTA, rhos=[0.0], horizon=n)
    u = decision_fractions(effective_observations(losses, rhos=[0.0]), rec.alpha, delta=DELTA, betting="up",
                           horizon=n)[..., 0, :]
    return log_e, u


def test_the_loss_mean_is_below_alpha_exactly_when_the_recovery_is_at_least_r():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        s, ref = rng.random(n), rng.random(n)
        r = float(rng.uniform(0.05, 1.5))
        rec = Recovery(r)
        l = rec.losses(s, ref)
        assert l.min() >= 0 and l.max() <= 1
        assert np.isclose(l.mean() - rec.alpha, (r * ref.mean() - s.mean()) / (1 + r))
        if abs(s.mean() / ref.mean() - r) > 1e-9:
            assert (l.mean() <= rec.alpha) == (s.mean() / ref.mean() >= r)
    assert Recovery(0.95).alpha == pytest.approx(1 / 1.95)
    # a candidate that beats the reference on an item gains there (the drop loss would count 0)
    assert Recovery(1.0).losses([1.0], [0.0])[0] == 0.0 and Recovery(1.0).losses([0.0], [1.0])[0] == 1.0


@pytest.mark.slow
def test_certifying_a_recovery_below_r_happens_at_most_delta_of_the_time():
    """1,000 runs of 300 paired binary scores with Rec = 0.94 tested at r = 0.95 (inspected after
    every label): certified in at most delta of them, within the 99% binomial ceiling; and the
    test is not vacuous at Rec = 0.99."""
    rng = np.random.default_rng(2)
    reps, n = 1000, 300
    s, ref = paired(rng, reps, n, 0.7, 0.94)
    rec = Recovery(0.95)
    wrong = certify(rec.losses(s, ref), alpha=rec.alpha, delta=DELTA, rhos=[0.0], horizon=n).certified.sum()
    assert wrong <= stats.binom.ppf(0.99, reps, DELTA)
    s, ref = paired(rng, 200, n, 0.7, 0.99)
    assert certify(rec.losses(s, ref), alpha=rec.alpha, delta=DELTA, rhos=[0.0], horizon=n).certified.mean() > 0.5


def test_the_bound_agrees_with_the_decision_and_inverts_a_literal_family():
    """L >= r exactly when the test certified (seeded or recomputed: the same); on a grid of r',
    the literal same-bets wealth max_t prod (1 - u_i (s_ref,i - s_i / r')) reaches 1/delta
    exactly for r' <= L (up to the search's tolerance)."""
    rng = np.random.default_rng(3)
    n = 200
    s, ref = paired(rng, 40, n, 0.65, 0.96)
    log_e, u = r_eval(s, ref, 0.93, n)
    passed = log_e.max(-1) >= math.log(1 / DELTA)
    L = recovery_lower_bound(s, ref, u, at_least=0.93, level=DELTA, rejected=passed)
    assert passed.any() and not passed.all()
    assert np.array_equal(L >= 0.93, passed)
    np.testing.assert_array_equal(L, recovery_lower_bound(s, ref, u, at_least=0.93, level=DELTA))
    grid = np.linspace(0.5, 1.3, 161)
    for row in range(8):
        rejected = []
        for r in grid:
            wealth = np.cumprod(1.0 - u[row] * (ref[row] - s[row] / r))
            rejected.append(wealth.max() >= 1 / DELTA)
        rejected = np.array(rejected)
        assert np.all(np.diff(rejected.astype(int)) <= 0)  # an interval (0, L]
        away = np.abs(grid - L[row]) > 1e-6
        assert np.array_equal(rejected[away], (grid <= L[row])[away])


@pytest.mark.slow
def test_the_bound_covers_the_recovery_at_a_data_dependent_stop():
    """600 runs with Rec = 0.95, tested at r = 0.9 and stopped at the first round end (rounds of
    25) where the e-value reaches 1/delta: P(L > Rec) <= delta within the 99% binomial ceiling."""
    rng = np.random.default_rng(4)
    reps, n = 600, 300
    s, ref = paired(rng, reps, n, 0.7, 0.95)
    log_e, u = r_eval(s, ref, 0.9, n)
    ends = np.arange(25, n + 1, 25)
    running = np.maximum.accumulate(log_e, axis=-1)[:, ends - 1]
    hit = running >= math.log(1 / DELTA)
    n_used = np.where(hit.any(-1), ends[hit.argmax(-1)], n)
    L = recovery_lower_bound(s, ref, u, at_least=0.9, level=DELTA, n_used=n_used,
                             rejected=running[np.arange(reps), n_used // 25 - 1] >= math.log(1 / DELTA))
    assert (L > 0.95).sum() <= stats.binom.ppf(0.99, reps, DELTA)
    assert hit.any() and not hit.all()
    assert np.median(L) > 0.85  # informative, not vacuous


def test_on_the_triviaqa_table_the_recovery_is_the_ratio_of_mean_scores():
    """The bundled table's score columns: the recoveries quantization users quote (the 10-bit
    configurations at about 1.00, mx_m4_r8_k16 at 0.903), and a test at r = 0.95 on 300 random
    items certifies the 6.16-bit configuration (Rec = 0.957) rarely and a 10-bit one (1.003)
    often."""
    score = load_loss_table(human="score_human", judge=None)
    reference = load_loss_table(human="score_fp_human", judge=None)
    rec = recovery_of(score.human, reference.human)
    by_name = dict(zip(score.candidates, rec))
    assert by_name["mx_m10_r8_k16"] == pytest.approx(1.0027, abs=1e-4)
    assert by_name["mx_m4_r8_k16"] == pytest.approx(0.9028, abs=1e-4)
    rng = np.random.default_rng(5)
    order = np.argsort(rng.random((100, score.human.shape[1])), axis=1)[:, :300]
    rate = {}
    for name in ("mx_m10_r8_k16", "mx_m5_r2_k64"):
        k = list(score.candidates).index(name)
        s, ref = score.human[k][order], reference.human[k][order]
        r = Recovery(0.95)
        rate[name] = certify(r.losses(s, ref), alpha=r.alpha, delta=DELTA, rhos=[0.0], horizon=300).certified.mean()
    assert rate["mx_m10_r8_k16"] > 0.7 and rate["mx_m5_r2_k64"] < rate["mx_m10_r8_k16"]


@pytest.mark.parametrize("bad, message", [
    (lambda: Recovery(0.0), "recovery must be a number in"),
    (lambda: Recovery(float("nan")), "recovery must be a number in"),
    (lambda: Recovery(True), "recovery must be a number in"),
    (lambda: Recovery(0.9).losses([1.2], [0.5]), "candidate scores must lie in"),
    (lambda: Recovery(0.9).losses([0.5], [0.5, 0.5]), "must be paired"),
    (lambda: recovery_lower_bound([0.5], [0.5], [1.5], at_least=0.9, level=0.1), "bet fractions"),
    (lambda: recovery_lower_bound([0.5], [0.5], [0.5], at_least=0.9, level=1.5), "level"),
])
def test_bad_input_is_a_one_line_error(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


def test_the_decision_bound_uses_the_fractions_of_r_evals_own_test():
    """recovery_decision_bound = recovery_lower_bound on R-Eval's fractions, seeded by its decision."""
    from certsel.policies.recovery import recovery_decision_bound

    rng = np.random.default_rng(7)
    n = 300
    s, ref = paired(rng, 40, n, 0.6, 0.97)
    for r in (0.9, 0.95):
        log_e, u = r_eval(s, ref, r, n)
        mx = log_e.max(axis=-1)
        got = recovery_decision_bound(s, ref, at_least=r, level=DELTA, delta=DELTA, horizon=n, max_log_evalue=mx,
                                      observation="paper")
        want = recovery_lower_bound(s, ref, u, at_least=r, level=DELTA, rejected=mx >= -math.log(DELTA))
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(got >= r, mx >= -math.log(DELTA))  # the bound agrees with the decision
