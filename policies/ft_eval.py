"""FT-Eval: auditing performance estimators with fault-tolerant equivalence tests.

Given N repeated estimates theta_hat_1..N of a quantity with known ground truth theta* (e.g. a benchmark mean on the
full labelled set), FT-Eval asks whether the estimator falls within a tolerance epsilon of the truth, bias and variance
together ("Fault-Tolerant Evaluation for Sample-Efficient Model Performance Estimators", Zhu, Wu and Xu; equation and
algorithm numbers are that paper's):

* :func:`bias_variance`: MSE = Bias^2 + Var (eqs. 1-2) and RMSE;
* :func:`t_test`: the two-sided one-sample t-test of H0: mean = theta* (eqs. 3-4);
* :func:`tost`: two one-sided t-tests with tolerance epsilon (eqs. 5-9); passing is equivalent to |Bias| + t_{alpha,N-1}
  sqrt(Var / (N-1)) < epsilon (eq. 15);
* :func:`select_margin`: Algorithm 1, the binary search for the smallest margin delta* that separates two estimators,
  with the dynamic tolerance eps_k = delta + t_{alpha,N-1} s_k / sqrt(N) at every budget k.

Estimates are shaped (N runs, B budgets) (or (N,) for one budget); everything is vectorised over budgets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ._validation import check_level


def _check_estimates(estimates) -> np.ndarray:
    try:
        e = np.asarray(estimates, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("estimates must be a numeric array (runs x budgets)") from None
    if e.ndim not in (1, 2):
        raise ValueError(f"estimates must be (runs,) or (runs, budgets), got shape {e.shape}")
    if e.shape[0] < 2:
        raise ValueError(f"need at least 2 runs for a t-test, got {e.shape[0]}")
    if not np.all(np.isfinite(e)):
        raise ValueError(f"estimates contain {int(np.count_nonzero(~np.isfinite(e)))} NaN or infinite value(s)")
    return e


def _check_truth(truth) -> float:
    try:
        t = float(truth)
    except (TypeError, ValueError):
        raise ValueError(f"truth must be a finite number, got {truth!r}") from None
    if not np.isfinite(t):
        raise ValueError(f"truth must be a finite number, got {truth!r}")
    return t


@dataclass(frozen=True)
class BiasVariance:
    bias: np.ndarray  # mean estimate - truth
    variance: np.ndarray  # (1/N) sum (theta_i - mean)^2
    mse: np.ndarray  # Bias^2 + Var (eq. 2)
    rmse: np.ndarray


def bias_variance(estimates, truth) -> BiasVariance:
    """Eqs. (1)-(2): MSE = (mean - theta*)^2 + (1/N) sum (theta_i - mean)^2."""
    e = _check_estimates(estimates)
    t = _check_truth(truth)
    bias = e.mean(axis=0) - t
    var = e.var(axis=0)
    mse = bias**2 + var
    return BiasVariance(bias, var, mse, np.sqrt(mse))


def _mean_sd(e):
    return e.mean(axis=0), e.std(axis=0, ddof=1)


@dataclass(frozen=True)
class TTest:
    statistic: np.ndarray
    p_value: np.ndarray


def t_test(estimates, truth) -> TTest:
    """Eqs. (3)-(4): t = (mean - theta*) / (s / sqrt(N)), p = 2 P(T_{N-1} > |t|); with zero spread t = +-inf (p = 0)
    unless the mean equals theta* exactly (p = 1)."""
    e = _check_estimates(estimates)
    truth = _check_truth(truth)
    N = e.shape[0]
    mean, s = _mean_sd(e)
    diff = mean - truth
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > 0, diff / (s / np.sqrt(N)), np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    return TTest(t, 2.0 * stats.t.sf(np.abs(t), N - 1))


@dataclass(frozen=True)
class TOSTResult:
    t_lower: np.ndarray
    t_upper: np.ndarray
    p_lower: np.ndarray
    p_upper: np.ndarray
    p_value: np.ndarray  # max(p_lower, p_upper)
    passed: np.ndarray  # p_value < alpha: the estimator is within epsilon of the truth
    epsilon: np.ndarray


def _tost_from_summary(mean, s, N, truth, epsilon, alpha):
    diff = mean - truth
    with np.errstate(divide="ignore", invalid="ignore"):
        se = s / np.sqrt(N)

        def stat(num):
            return np.where(se > 0, num / se, np.where(num > 0, np.inf, np.where(num < 0, -np.inf, 0.0)))

        t_l = stat(diff + epsilon)
        t_u = stat(epsilon - diff)
    p_l = stats.t.sf(t_l, N - 1)
    p_u = stats.t.sf(t_u, N - 1)
    p = np.maximum(p_l, p_u)
    return TOSTResult(t_l, t_u, p_l, p_u, p, p < alpha, np.broadcast_to(epsilon, np.shape(p)).copy())


def tost(estimates, truth, epsilon, *, alpha: float = 0.05) -> TOSTResult:
    """Eqs. (5)-(9): reject both H0^(L): mean - theta* <= -eps and H0^(U): mean - theta* >= eps.

    ``epsilon``: a positive scalar or one per budget. ``passed``: both one-sided p-values below alpha, i.e.
    |Bias| + t_{alpha,N-1} s / sqrt(N) < epsilon (eq. 14).
    """
    e = _check_estimates(estimates)
    truth = _check_truth(truth)
    alpha = check_level(alpha, "alpha")
    eps = np.asarray(epsilon, dtype=np.float64)
    if not np.all(np.isfinite(eps)) or np.any(eps <= 0):
        raise ValueError(f"epsilon must be positive and finite, got {epsilon!r}")
    mean, s = _mean_sd(e)
    if eps.ndim > 0 and eps.shape != np.shape(mean):
        raise ValueError(f"epsilon must be a scalar or have one value per budget ({np.shape(mean)}), got {eps.shape}")
    return _tost_from_summary(mean, s, e.shape[0], truth, eps, alpha)


def dynamic_tolerance(s, n_runs: int, margin: float, alpha: float):
    """Algorithm 1: eps_k = delta + t_{alpha, N-1} * s_k / sqrt(N)."""
    return margin + stats.t.isf(alpha, n_runs - 1) * np.asarray(s, dtype=np.float64) / np.sqrt(n_runs)


@dataclass(frozen=True)
class MarginSearch:
    """Result of Algorithm 1: ``margin``, the smallest margin delta* found that distinguishes the estimators, or None;
    ``steps``: every probed margin with (distinguished, first budget where the outcomes differ (1-based, 0 if none),
    pass_A and pass_B at the last budget examined)."""

    margin: float | None
    steps: list

    def passes(self, estimates, truth, alpha=0.05):
        """FT-Eval pass/fail per budget for ``estimates`` at the selected margin."""
        if self.margin is None:
            raise ValueError("no margin distinguishes the estimators")
        return ft_eval_passes(estimates, truth, self.margin, alpha=alpha)


def ft_eval_passes(estimates, truth, margin: float, *, alpha: float = 0.05) -> TOSTResult:
    """TOST at every budget with the dynamic tolerance of Algorithm 1 for a given margin."""
    e = _check_estimates(estimates)
    if e.ndim == 1:
        e = e[:, None]
    truth = _check_truth(truth)
    alpha = check_level(alpha, "alpha")
    mean, s = _mean_sd(e)
    eps = dynamic_tolerance(s, e.shape[0], margin, alpha)
    return _tost_from_summary(mean, s, e.shape[0], truth, eps, alpha)


def select_margin(estimates_a, estimates_b, truth, *, alpha: float = 0.05, resolution: float = 0.01) -> MarginSearch:
    """Algorithm 1: binary search on [0, 1] for the smallest margin delta* that separates A and B.

    ``estimates_a``, ``estimates_b``: (N runs, |S| budgets), column k the estimates at budget k + 1 (``Run(E, N, k)``).
    For a probed delta the budgets are scanned in order; the estimators are distinguished at the first budget where one
    passes and the other fails. Distinguished, or both passing at the last budget examined, moves the search left; both
    failing moves it right. Stops when high - low < ``resolution`` (0.01 in the paper).
    """
    a = _check_estimates(estimates_a)
    b = _check_estimates(estimates_b)
    a = a[:, None] if a.ndim == 1 else a
    b = b[:, None] if b.ndim == 1 else b
    if a.shape != b.shape:
        raise ValueError(f"estimates_a and estimates_b must have the same shape, got {a.shape} and {b.shape}")
    truth = _check_truth(truth)
    alpha = check_level(alpha, "alpha")
    if not 0.0 < float(resolution) < 1.0:
        raise ValueError(f"resolution must be in (0, 1), got {resolution!r}")
    best, low, high, steps = None, 0.0, 1.0, []
    while high - low >= resolution:
        delta = 0.5 * (low + high)
        pa = ft_eval_passes(a, truth, delta, alpha=alpha).passed
        pb = ft_eval_passes(b, truth, delta, alpha=alpha).passed
        differ = pa != pb
        distinguished = bool(differ.any())
        last = int(differ.argmax()) if distinguished else a.shape[1] - 1
        steps.append((delta, distinguished, last + 1 if distinguished else 0, bool(pa[last]), bool(pb[last])))
        if distinguished:
            best, high = delta, delta
        elif pa[last] and pb[last]:
            high = delta
        else:
            low = delta
    return MarginSearch(best, steps)
