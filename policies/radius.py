"""Confidence radii for certified estimation of a mean loss in [0, 1].

* the closed-form radii of Cer-Eval ("Cer-Eval: Certifiable and Cost-Efficient Evaluation Framework for LLMs"): the
  static Hoeffding radius of ``Base``, the adaptive Hoeffding radius of Lemma B.3 / Algorithm 3 (Seq with
  ``radius="paper"``) and the per-group adaptive empirical-Bernstein radius of Algorithm 1, lines 10-11;
* the predictable-plug-in empirical-Bernstein confidence sequence (PrPl-EB, Theorem 2 of Waudby-Smith & Ramdas,
  "Estimating means of bounded random variables by betting", arXiv:2010.09686) for i.i.d. observations in [0, 1], a
  closed-form reference (``radius="betting"`` uses the tighter :mod:`certsel.policies.confseq`).

``log`` inside the iterated-logarithm terms is base 2: the proofs of Lemmas B.3 and B.5 peel time into epochs [2^l,
2^(l+1)), and ``u_{2^l} = 2 ln(l + 1) + ln(4/delta)`` makes the union over epochs sum to
``delta/4 * pi^2/6 <= delta/2``.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import check_level

PRPL_CAP = 0.5  # c in lambda_t = min(sqrt(...), c); WSR recommend 1/2 or 3/4


def _as_counts(n) -> np.ndarray:
    a = np.asarray(n, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError("sample sizes must be finite and non-negative")
    return a


def epsilon_star(n, delta: float):
    """The paper's reference error level of static evaluation: sqrt(ln(1/delta) / (2n)).

    The one-sided Hoeffding deviation at level delta (section 6.1); section 6's saving ratios are reported over epsilon
    in [epsilon_star, 0.1]. As a two-sided interval it covers with probability 1 - 2 delta, so :class:`Base` reports
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
    """Lemma B.3 / Algorithm 3 line 3: sqrt((2 ln(log2 n + 1) + ln(4/delta)) / n); ``n = 0`` gives inf.

    Time-uniform: with probability >= 1 - delta the sample mean stays within this radius of the mean at every n (each
    tail bounded by delta/4 * pi^2/6).
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
    """Algorithm 1 line 11: eps_k = 2 eta_k^2 / 3 + 2 sqrt((v_k + eta_k + eta_k^2) eta_k^2); ``n = 0`` gives inf.

    ``variance``: the empirical v_k with divisor n_k (line 9). The eta_k inside the root pays for estimating v_k (the
    event E in the proof of Theorem 5.2), so the radius cannot fall below 2 eta_k^(3/2).
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


def prpl_path(x, alpha: float):
    """PrPl-EB interval (center, radius) after every observation of ``x`` (..., n), time on the last axis."""
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
