"""Error rates by simulation: Type-I error under the null, the martingale property at the
boundary, and anytime coverage of the confidence intervals. REPS = 500 runs per case here
(a true rate of 2 delta exceeds the 99% binomial ceiling with probability > 0.9999); the same
cases at 2,000 runs (1,000 for the split boundary) are benchmarks/validity_simulations.py's,
with their table in docs/statistics.md."""

import numpy as np
import pytest
from certsel.policies import (
    BetUse,
    bet_names,
    certify,
    get_strategy,
    confidence_interval,
    log_evalue_paths,
    scheme_rhos,
)
from scipy import stats
from helpers.simulate import bernoulli, resample

pytestmark = pytest.mark.slow  # error-rate simulations

SCHEMES = ["r-eval", "r-autoeval", "r-autoeval+"]
BETTINGS = bet_names(BetUse.TEST)
DELTA = 0.1
REPS = 500  # the benchmark runs 2,000


def binomial_ceiling(reps, p, conf=0.99):
    """Largest count of failures compatible with a true rate p at this confidence."""
    return stats.binom.ppf(conf, reps, p)


def type_one_bernoulli(scheme, betting, reps) -> int:
    """Certifications of ``reps`` Bernoulli runs (n = 300, r = 3) with R = 0.105 > alpha = 0.1."""
    rng = np.random.default_rng(SCHEMES.index(scheme) + 10 * BETTINGS.index(betting))
    alpha, R = 0.1, 0.105
    h, jl, ju = bernoulli(rng, reps, 300, 900, R, flip=0.1)
    res = certify(h, jl, ju, alpha=alpha, delta=DELTA, rhos=scheme_rhos(scheme), betting=betting)
    return int(res.certified.sum())


@pytest.mark.parametrize("betting", BETTINGS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_type_one_error_bernoulli(scheme, betting):
    assert type_one_bernoulli(scheme, betting, REPS) <= binomial_ceiling(REPS, DELTA)


def type_one_real(table, scheme, betting, reps) -> int:
    """Certifications of ``reps`` resamples of the real TriviaQA candidate with risk 0.0994,
    tested at a target just below it (the null holds by 0.002)."""
    rng = np.random.default_rng(1 + SCHEMES.index(scheme) + 10 * BETTINGS.index(betting))
    k = 36
    R = table.true_risk[k]
    h, jl, ju = resample(rng, table.human[k], table.judge[k], reps, 300, 900)
    res = certify(h, jl, ju, alpha=R - 0.002, delta=DELTA, rhos=scheme_rhos(scheme), betting=betting)
    return int(res.certified.sum())


@pytest.mark.parametrize("betting", BETTINGS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_type_one_error_real_resamples(trivia_best, scheme, betting):
    """R-AutoEval+ on resamples of the real TriviaQA candidate with risk 0.0994, tested at
    a target just below it (the null holds by 0.002)."""
    assert type_one_real(trivia_best, scheme, betting, REPS) <= binomial_ceiling(REPS, DELTA)


@pytest.mark.parametrize("betting", BETTINGS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_martingale_at_the_boundary(scheme, betting):
    """At R = alpha every e-process here is a martingale, so E[E_n] = 1 exactly. A bet that
    peeks at the current observation, a wrong effective observation or a wrong mixture
    would move the mean; the control below shows the test detects a shift of 0.02."""
    rng = np.random.default_rng(99 + SCHEMES.index(scheme) + 10 * BETTINGS.index(betting))
    alpha, reps = 0.2, 40_000
    kw = dict(delta=DELTA, rhos=scheme_rhos(scheme), betting=betting)

    h, jl, ju = bernoulli(rng, reps, 20, 60, alpha, flip=0.15)
    e = np.exp(log_evalue_paths(h, jl, ju, alpha=alpha, **kw)[:, -1])
    se = e.std(ddof=1) / np.sqrt(reps)
    assert se < 0.05
    assert abs(e.mean() - 1.0) < 4.5 * se

    h, jl, ju = bernoulli(rng, reps, 20, 60, alpha - 0.02, flip=0.15)
    e_alt = np.exp(log_evalue_paths(h, jl, ju, alpha=alpha, **kw)[:, -1])
    assert e_alt.mean() > 1.0 + 5 * e_alt.std(ddof=1) / np.sqrt(reps)


def _ever_excluded(h, jl, ju, R, *, delta, rhos, betting):
    """The miscoverage event of the two-sided interval, at any time up to n: the upper
    e-process at a = R, or the mirrored lower one, crosses 2/delta."""
    kw = dict(delta=delta / 2, rhos=rhos, betting=betting, bet_bound="range")
    thr = np.log(2 / delta)
    up = log_evalue_paths(h, jl, ju, alpha=R, **kw).max(axis=-1) >= thr
    down = log_evalue_paths(1 - h, 1 - jl, 1 - ju, alpha=1 - R, **kw).max(axis=-1) >= thr
    return up | down


def coverage_runs(scheme, betting, reps):
    """``reps`` Bernoulli runs (n = 200, r = 3, R = 0.3) and whether each one's two-sided
    interval ever excluded R."""
    rng = np.random.default_rng(7 + SCHEMES.index(scheme) + 10 * BETTINGS.index(betting))
    R = 0.3
    h, jl, ju = bernoulli(rng, reps, 200, 600, R, flip=0.1)
    return _ever_excluded(h, jl, ju, R, delta=DELTA, rhos=scheme_rhos(scheme), betting=betting), (h, jl, ju)


@pytest.mark.parametrize("betting", BETTINGS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_anytime_coverage(scheme, betting):
    R, rhos = 0.3, scheme_rhos(scheme)
    missed, (h, jl, ju) = coverage_runs(scheme, betting, REPS)
    assert missed.sum() <= binomial_ceiling(REPS, DELTA)

    # the reported intervals (bisection) agree with the event: no crossing => R inside. A
    # strategy whose bets depend on the target (ONS) reports the intervals of its
    # interval_strategy(), so the event is that strategy's.
    m = 60
    shown = get_strategy(betting).interval_strategy()
    if shown.name != betting:
        missed = _ever_excluded(h, jl, ju, R, delta=DELTA, rhos=rhos, betting=shown)
    low, high = confidence_interval(h[:m], jl[:m], ju[:m], delta=DELTA, rhos=rhos, betting=shown)
    inside = (low <= R) & (R <= high)
    assert np.all(inside[~missed[:m]])
    assert np.all((high - low) < 0.5) and np.all(low < high)


def coverage_real(table, reps) -> dict:
    """For every strategy, how many of ``reps`` resamples of the real TriviaQA candidate 33
    had an R-AutoEval+ interval that ever excluded its R."""
    rng = np.random.default_rng(5)
    k = 33
    R = table.true_risk[k]
    h, jl, ju = resample(rng, table.human[k], table.judge[k], reps, 300, 900)
    return {betting: int(_ever_excluded(h, jl, ju, R, delta=DELTA, rhos=scheme_rhos("r-autoeval+"),
                                        betting=betting).sum()) for betting in BETTINGS}


def test_anytime_coverage_real_resamples(trivia_best):
    for betting, missed in coverage_real(trivia_best, REPS).items():
        assert missed <= binomial_ceiling(REPS, DELTA), betting


def test_intervals_shrink_and_judge_helps():
    rng = np.random.default_rng(3)
    h, jl, ju = bernoulli(rng, 50, 400, 1200, 0.3, flip=0.02)
    widths = {}
    for scheme in ("r-eval", "r-autoeval+"):
        lo_a, hi_a = confidence_interval(h[:, :100], jl[:, :100], ju[:, :300], delta=DELTA, rhos=scheme_rhos(scheme), betting="wsr")
        lo_b, hi_b = confidence_interval(h, jl, ju, delta=DELTA, rhos=scheme_rhos(scheme), betting="wsr")
        assert np.all(hi_b - lo_b < hi_a - lo_a)
        widths[scheme] = np.mean(hi_b - lo_b)
    # an almost perfect judge with three times more judge labels narrows the interval
    assert widths["r-autoeval+"] < 0.85 * widths["r-eval"]


# -- the split observation ------------------------------------------------------------------


def _judges(rng, h):
    """Judges of every quality on the same human losses: good (10% flips), useless (a coin),
    adversarial (1 - human) and pure noise in [0, 1]."""
    return {
        "good": lambda: (h != (rng.random(h.shape) < 0.1)).astype(float),
        "useless": lambda: (rng.random(h.shape) < 0.5).astype(float),
        "adversarial": lambda: 1.0 - h,
        "noise": lambda: rng.random(h.shape),
    }


def split_boundary_certified(scheme, betting, reps) -> dict:
    """For each judge, how many of ``reps`` runs at R = alpha = 0.1 exactly (n = 300 human
    labels, r = 3 judge-only labels) the split observation certified."""
    rng = np.random.default_rng(31 + 7 * BETTINGS.index(betting) + len(scheme))
    alpha, n = 0.1, 300
    h = (rng.random((reps, n)) < alpha).astype(float)
    hu = (rng.random((reps, 3 * n)) < alpha).astype(float)
    out = {}
    for name in ("good", "useless", "adversarial", "noise"):
        jl, ju = _judges(rng, h)[name](), _judges(rng, hu)[name]()
        res = certify(h, jl, ju, alpha=alpha, delta=DELTA, rhos=scheme_rhos(scheme), betting=betting,
                      observation="split")
        out[name] = int(res.certified.sum())
    return out


@pytest.mark.parametrize("betting", BETTINGS)
@pytest.mark.parametrize("scheme", ["r-autoeval", "r-autoeval+"])
def test_split_type_one_error_at_the_boundary_with_every_judge(scheme, betting):
    """R = alpha exactly (the least favourable null), 300 runs of n = 300 human labels and
    r = 3 judge-only labels each (1,000 in benchmarks/validity_simulations.py), for a good, a
    useless, an adversarial and a noise judge: the split observation certifies at most as
    often as delta allows (43 of 300; a true rate of 2 delta fails with probability 0.993)."""
    reps = 300
    for name, certified in split_boundary_certified(scheme, betting, reps).items():
        assert certified <= binomial_ceiling(reps, DELTA), name


@pytest.mark.parametrize("betting", BETTINGS)
def test_split_e_process_is_a_supermartingale_at_the_boundary(betting):
    """At R = alpha the split product has mean 1 - lambda^2 E[x - alpha]^2 <= 1 at each step:
    E[E_n] <= 1 by simulation, while an alternative 0.02 below alpha grows it clearly."""
    rng = np.random.default_rng(77 + BETTINGS.index(betting))
    alpha, reps = 0.2, 40_000
    kw = dict(delta=DELTA, rhos=scheme_rhos("r-autoeval+"), betting=betting, observation="split")
    h, jl, ju = bernoulli(rng, reps, 20, 60, alpha, flip=0.15)
    e = np.exp(log_evalue_paths(h, jl, ju, alpha=alpha, **kw)[:, -1])
    se = e.std(ddof=1) / np.sqrt(reps)
    assert se < 0.05 and e.mean() < 1.0 + 3 * se
    h, jl, ju = bernoulli(rng, reps, 20, 60, alpha - 0.02, flip=0.15)
    e_alt = np.exp(log_evalue_paths(h, jl, ju, alpha=alpha, **kw)[:, -1])
    assert e_alt.mean() > 1.0 + 5 * e_alt.std(ddof=1) / np.sqrt(reps)


def split_real(table, betting, reps) -> int:
    """Certifications of ``reps`` resamples of the real TriviaQA candidate 36 (R = 0.0994) at
    alpha = R - 0.002 with the split observation."""
    k = 36
    R = table.true_risk[k]
    rng = np.random.default_rng(5 + BETTINGS.index(betting))
    h, jl, ju = resample(rng, table.human[k], table.judge[k], reps, 300, 900)
    res = certify(h, jl, ju, alpha=R - 0.002, delta=DELTA, betting=betting, observation="split")
    return int(res.certified.sum())


def test_split_type_one_error_real_resamples(trivia_best, trivia_bad):
    """The real TriviaQA candidate with R = 0.0994 at alpha = R - 0.002 (the null holds by
    0.002), with the best and the bad judge, every strategy: at most delta."""
    for judge, table in (("best", trivia_best), ("bad", trivia_bad)):
        for betting in BETTINGS:
            assert split_real(table, betting, REPS) <= binomial_ceiling(REPS, DELTA), (judge, betting)
