"""FT-Eval against independent computations, and the section 6 finding on AlpacaEval."""

import numpy as np
import pytest
from helpers.active_testing import (
    active_bayesian_assessment,
    random_sampling_estimates,
    silhouette_clusters,
)
from certsel.policies.ft_eval import (
    bias_variance,
    dynamic_tolerance,
    ft_eval_passes,
    select_margin,
    t_test,
    tost,
)
from scipy import stats


def test_t_test_matches_scipy():
    rng = np.random.default_rng(0)
    e = rng.normal(0.52, 0.03, size=(50, 7))
    res = t_test(e, 0.5)
    ref = stats.ttest_1samp(e, 0.5, axis=0)
    np.testing.assert_allclose(res.statistic, ref.statistic, rtol=1e-12)
    np.testing.assert_allclose(res.p_value, ref.pvalue, rtol=1e-10)


def test_bias_variance_decomposition_eq_2():
    rng = np.random.default_rng(1)
    e = rng.normal(0.3, 0.1, size=200)
    bv = bias_variance(e, 0.25)
    assert bv.mse == pytest.approx(np.mean((e - 0.25) ** 2), rel=1e-12)
    assert bv.bias == pytest.approx(e.mean() - 0.25)
    # eq. (4): t = sqrt(N - 1) * Bias / sqrt(Var)
    assert t_test(e, 0.25).statistic == pytest.approx(np.sqrt(199) * bv.bias / np.sqrt(bv.variance), rel=1e-12)


def test_tost_against_two_scipy_one_sided_tests_and_eq_14():
    rng = np.random.default_rng(2)
    e = rng.normal(0.51, 0.02, size=(40, 5))
    eps = 0.02
    res = tost(e, 0.5, eps, alpha=0.05)
    lo = stats.ttest_1samp(e, 0.5 - eps, axis=0, alternative="greater").pvalue
    hi = stats.ttest_1samp(e, 0.5 + eps, axis=0, alternative="less").pvalue
    np.testing.assert_allclose(res.p_lower, lo, rtol=1e-10)
    np.testing.assert_allclose(res.p_upper, hi, rtol=1e-10)
    s = e.std(axis=0, ddof=1)
    eq14 = np.abs(e.mean(axis=0) - 0.5) + stats.t.isf(0.05, 39) * s / np.sqrt(40) < eps
    np.testing.assert_array_equal(res.passed, eq14)


def test_dynamic_tolerance_reduces_ft_eval_to_bias_below_margin():
    # with eps_k = delta + t s / sqrt(N), eq. (14) holds iff |Bias| < delta
    rng = np.random.default_rng(3)
    e = rng.normal(0.5, 0.05, size=(30, 200)) + np.linspace(-0.03, 0.03, 200)
    for margin in (0.005, 0.01, 0.02):
        passed = ft_eval_passes(e, 0.5, margin).passed
        np.testing.assert_array_equal(passed, np.abs(e.mean(axis=0) - 0.5) < margin)
    assert dynamic_tolerance(0.0, 30, 0.01, 0.05) == pytest.approx(0.01)


def test_select_margin_finds_the_separating_margin():
    rng = np.random.default_rng(4)
    truth, N, B = 0.5, 100, 50
    unbiased = truth + rng.normal(0, 0.05, (N, B)) / np.sqrt(np.arange(1, B + 1))
    biased = truth + 0.03 + rng.normal(0, 0.01, (N, B))
    ms = select_margin(biased, unbiased, truth)
    assert ms.margin is not None and ms.margin <= 0.03
    assert not ms.passes(biased, truth).passed.any()
    # indistinguishable estimators: no margin
    assert select_margin(unbiased, unbiased.copy(), truth).margin is None


def test_ft_eval_section_6_finding_on_alpacaeval(alpaca):
    """Active Bayesian Assessment on FuseChat: small variance, persistent bias.

    RMSE prefers it over random sampling, the two-sided t-test rejects it, and TOST with the
    margin selected by Algorithm 1 explains why: its bias stays above the margin.
    """
    z = alpaca.losses[alpaca.models.index("FuseChat-Llama-3.2-1B-Instruct")]
    truth = z.mean()
    groups, k = silhouette_clusters(alpaca.features)
    assert 2 <= k <= 10
    aba = active_bayesian_assessment(z, alpaca.features, 100, reps=100, seed=0, groups=groups)
    rs = random_sampling_estimates(z, 100, reps=100, seed=1)
    for budget in (20, 60, 80):
        b_aba, b_rs = bias_variance(aba[:, budget - 1], truth), bias_variance(rs[:, budget - 1], truth)
        assert b_aba.rmse < b_rs.rmse  # RMSE prefers the active estimator
        assert b_aba.variance < b_rs.variance
        assert t_test(aba[:, budget - 1], truth).p_value < 0.01  # the t-test rejects it
        assert t_test(rs[:, budget - 1], truth).p_value > 0.05
    ms = select_margin(aba, rs, truth)
    assert ms.margin is not None
    pa, pr = ms.passes(aba, truth).passed, ms.passes(rs, truth).passed
    assert pr.sum() > 50 and pa.sum() < pr.sum()
    assert np.all(np.abs(bias_variance(aba, truth).bias[~pa]) >= ms.margin)


def test_ft_eval_bad_input():
    with pytest.raises(ValueError, match="at least 2 runs"):
        t_test([0.5], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        tost([0.5, np.nan], 0.5, 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        tost([0.5, 0.4], 0.5, 0.0)
    with pytest.raises(ValueError, match="same shape"):
        select_margin(np.zeros((3, 4)), np.zeros((3, 5)), 0.0)
    with pytest.raises(ValueError, match="truth"):
        bias_variance([0.1, 0.2], float("nan"))
    with pytest.raises(ValueError, match="rows"):
        active_bayesian_assessment(np.zeros(10), np.zeros((9, 2)), 5)
    with pytest.raises(ValueError, match="exceeds"):
        random_sampling_estimates(np.zeros(10), 11)
