"""Confidence radii for certified estimation of a mean loss in [0, 1].

Two families live here:

* the closed-form radii of Cer-Eval (``../shared/papers/cer-eval.md``): the static
  Hoeffding radius of ``Base``, the adaptive Hoeffding radius of Lemma B.3 / Algorithm 3
  (``Seq``) and the per-group adaptive empirical-Bernstein radius of Algorithm 1, lines
  10-11;
* the predictable-plug-in empirical-Bernstein confidence sequence (PrPl-EB, Theorem 2 of
  Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting"),
  a time-uniform interval that adapts to the variance without the eta^(3/2) slack of the
  closed-form Bernstein radius. ``radius="betting"`` in :mod:`certsel.policies.cer_eval`
  uses it.

``log`` inside the iterated-logarithm terms is base 2: the proofs of Lemmas B.3 and B.5
peel time into epochs [2^l, 2^(l+1)), and ``u_{2^l} = 2 ln(l + 1) + ln(4/delta)`` is what
makes the union over epochs sum to ``delta/4 * pi^2/6 <= delta/2``.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import check_level

# PrPl-EB accumulators per group, in this order (see prpl_accumulate):
#   t   number of observations
#   S   sum of x
#   SS  sum of (x_i - mu_i)^2, mu_i the regularised running mean after i observations
#   L   sum of lambda_i
#   LX  sum of lambda_i * x_i
#   VP  sum of v_i * psi_E(lambda_i)
PRPL_FIELDS = ("t", "S", "SS", "L", "LX", "VP")
PRPL_CAP = 0.5  # c in lambda_t = min(sqrt(...), c); WSR recommend 1/2 or 3/4


def _as_counts(n) -> np.ndarray:
    a = np.asarray(n, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError("sample sizes must be finite and non-negative")
    return a


def epsilon_star(n, delta: float):
    """The paper's reference error level of static evaluation: sqrt(ln(1/delta) / (2n)).

    This is the one-sided Hoeffding deviation at level delta (section 6.1); the saving
    ratios of section 6 are reported over epsilon in [epsilon_star, 0.1]. As a two-sided
    interval it covers with probability 1 - 2 delta, which is why :class:`Base` reports
    :func:`hoeffding_radius` instead.
    """
    delta = check_level(delta, "delta")
    n = _as_counts(n)
    with np.errstate(divide="ignore"):
        return np.sqrt(math.log(1.0 / delta) / (2.0 * n))


def hoeffding_radius(n, delta: float):
    """Two-sided fixed-n Hoeffding radius sqrt(ln(2/delta) / (2n)) for a mean in [0, 1]."""
    delta = check_level(delta, "delta")
    n = _as_counts(n)
    with np.errstate(divide="ignore"):
        return np.sqrt(math.log(2.0 / delta) / (2.0 * n))


def _iterated_log_term(n: np.ndarray) -> np.ndarray:
    return 2.0 * np.log(np.log2(np.maximum(n, 1.0)) + 1.0)


def _adaptive_hoeffding(n: np.ndarray, delta: float) -> np.ndarray:
    u = _iterated_log_term(n) + math.log(4.0 / delta)
    return np.where(n > 0, np.sqrt(u / np.maximum(n, 1.0)), np.inf)


def _bernstein(v: np.ndarray, n: np.ndarray, n_groups: int, delta: float) -> np.ndarray:
    e2 = (_iterated_log_term(n) + math.log(16.0 * n_groups / delta)) / np.maximum(n, 1.0)
    eta = np.sqrt(e2)
    return np.where(n > 0, 2.0 * e2 / 3.0 + 2.0 * np.sqrt((v + eta + e2) * e2), np.inf)


def adaptive_hoeffding_radius(n, delta: float):
    """Lemma B.3 / Algorithm 3 line 3: sqrt((2 ln(log2 n + 1) + ln(4/delta)) / n).

    Time-uniform: with probability >= 1 - delta the sample mean stays within this radius
    of the mean at every n (each tail is bounded by delta/4 * pi^2/6). ``n = 0`` gives inf.
    """
    return _adaptive_hoeffding(_as_counts(n), check_level(delta, "delta"))


def bernstein_eta(n, n_groups: int, delta: float):
    """Algorithm 1 line 10: eta_k = sqrt((2 ln(log2 n_k + 1) + ln(16 K / delta)) / n_k)."""
    delta = check_level(delta, "delta")
    n = _as_counts(n)
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    u = _iterated_log_term(n) + math.log(16.0 * n_groups / delta)
    return np.where(n > 0, np.sqrt(u / np.maximum(n, 1.0)), np.inf)


def bernstein_radius(variance, n, n_groups: int, delta: float):
    """Algorithm 1 line 11: eps_k = 2 eta_k^2 / 3 + 2 sqrt((v_k + eta_k + eta_k^2) eta_k^2).

    ``variance`` is the empirical variance v_k with divisor n_k (line 9). The eta_k inside
    the square root pays for estimating v_k (the event E in the proof of Theorem 5.2), which
    is why this radius cannot fall below 2 eta_k^(3/2). ``n = 0`` gives inf.
    """
    delta = check_level(delta, "delta")
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    v = np.asarray(variance, dtype=np.float64)
    if np.any(~np.isfinite(v)) or np.any(v < 0):
        raise ValueError("variance must be finite and non-negative")
    return _bernstein(v, _as_counts(n), n_groups, delta)


def _prpl_lambda(sig_prev, t, log_term):
    return np.minimum(np.sqrt(2.0 * log_term / (sig_prev * t * np.log1p(t))), PRPL_CAP)


def _psi_e(lam):
    return (-np.log1p(-lam) - lam) / 4.0


def _group_cumsum(values: np.ndarray, starts_per_obs: np.ndarray) -> np.ndarray:
    """Cumulative sums that restart at every group boundary (observations sorted by group)."""
    c = np.cumsum(values)
    before = c[starts_per_obs] - values[starts_per_obs]
    return c - before


def prpl_accumulate(x, groups, n_groups: int, alpha: float) -> np.ndarray:
    """PrPl-EB accumulators (array (6, n_groups), rows :data:`PRPL_FIELDS`) from scratch.

    ``x`` are the observations in the order they were drawn and ``groups`` their group ids;
    each group runs its own confidence sequence at level ``alpha`` (two-sided). Theorem 2
    of WSR: with mu_t = (1/2 + sum x)/(t+1), sigma2_t = (1/4 + sum (x_i - mu_i)^2)/(t+1),
    lambda_t = min(sqrt(2 ln(2/alpha) / (sigma2_{t-1} t ln(1+t))), c), v_t = 4 (x_t -
    mu_{t-1})^2 and psi_E(l) = (-ln(1-l) - l)/4, the interval
    sum(lambda x)/sum(lambda) +- (ln(2/alpha) + sum v psi_E(lambda)) / sum(lambda)
    covers the mean at every t with probability >= 1 - alpha.
    """
    x = np.asarray(x, dtype=np.float64)
    g = np.asarray(groups, dtype=np.int64)
    acc = np.zeros((6, n_groups))
    if x.size == 0:
        return acc
    log_term = math.log(2.0 / alpha)
    order = np.argsort(g, kind="stable")
    xs, gs = x[order], g[order]
    counts = np.bincount(gs, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    first = starts[gs]
    t = (np.arange(xs.size) - first + 1).astype(np.float64)
    s = _group_cumsum(xs, first)
    mu = (0.5 + s) / (t + 1.0)
    mu_prev = (0.5 + s - xs) / t
    sq = (xs - mu) ** 2
    ss = _group_cumsum(sq, first)
    sig_prev = (0.25 + ss - sq) / t
    lam = _prpl_lambda(sig_prev, t, log_term)
    vpsi = 4.0 * (xs - mu_prev) ** 2 * _psi_e(lam)
    acc[0] = counts
    acc[1] = np.bincount(gs, weights=xs, minlength=n_groups)
    acc[2] = np.bincount(gs, weights=sq, minlength=n_groups)
    acc[3] = np.bincount(gs, weights=lam, minlength=n_groups)
    acc[4] = np.bincount(gs, weights=lam * xs, minlength=n_groups)
    acc[5] = np.bincount(gs, weights=vpsi, minlength=n_groups)
    return acc


def prpl_step(acc: np.ndarray, k: int, x: float, alpha: float) -> None:
    """Add one observation ``x`` to group ``k`` of ``acc`` in place (scalar fast path).

    Same arithmetic as :func:`prpl_accumulate`; the tests check the two agree.
    """
    t_prev, s, ss = acc[0, k], acc[1, k], acc[2, k]
    t = t_prev + 1.0
    mu_prev = (0.5 + s) / t
    sig_prev = (0.25 + ss) / t
    s += x
    mu = (0.5 + s) / (t + 1.0)
    lam = min(math.sqrt(2.0 * math.log(2.0 / alpha) / (sig_prev * t * math.log1p(t))), PRPL_CAP)
    acc[0, k] = t
    acc[1, k] = s
    acc[2, k] = ss + (x - mu) ** 2
    acc[3, k] += lam
    acc[4, k] += lam * x
    acc[5, k] += (x - mu_prev) ** 2 * (-math.log1p(-lam) - lam)


def prpl_interval(acc: np.ndarray, alpha: float):
    """Per-group (center, radius) from PrPl-EB accumulators; empty groups get (1/2, 1/2)."""
    t, lam_x, vpsi = acc[0], acc[4], acc[5]
    lam_sum = np.where(t > 0, acc[3], 1.0)
    center = np.where(t > 0, lam_x / lam_sum, 0.5)
    radius = np.where(t > 0, (math.log(2.0 / alpha) + vpsi) / lam_sum, 0.5)
    return center, radius


def prpl_path(x, alpha: float):
    """PrPl-EB interval after every observation: (center, radius), batched over leading axes.

    ``x`` has shape (..., n): the last axis is time.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    t = np.arange(1, n + 1, dtype=np.float64)
    s = np.cumsum(x, axis=-1)
    mu = (0.5 + s) / (t + 1.0)
    mu_prev = (0.5 + s - x) / t
    sq = (x - mu) ** 2
    ss = np.cumsum(sq, axis=-1)
    sig_prev = (0.25 + ss - sq) / t
    log_term = math.log(2.0 / alpha)
    lam = _prpl_lambda(sig_prev, t, log_term)
    lam_sum = np.cumsum(lam, axis=-1)
    center = np.cumsum(lam * x, axis=-1) / lam_sum
    radius = (log_term + np.cumsum(4.0 * (x - mu_prev) ** 2 * _psi_e(lam), axis=-1)) / lam_sum
    return center, radius
