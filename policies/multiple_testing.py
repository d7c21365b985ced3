"""Family-wise error control over candidates, from per-candidate e-values.

Each candidate k carries an e-process; ``E_k`` is its running maximum up to the decision time. By Ville's inequality
``p_k = min(1, 1 / E_k)`` is a valid p-value even when that time was chosen by looking at the data, so the classical
procedures apply:

* fixed-sequence testing (FST): candidates in a pre-set order at the full level delta, stopping at the first failure;
  the certified set is the longest certified prefix;
* Bonferroni: certify k when E_k >= K / delta;
* Holm: step-down over the sorted p-values, certify while p_(j) <= delta / (K - j + 1); it certifies everything
  Bonferroni does and possibly more.

All three control P(certify any candidate whose null is true) <= delta. The candidate axis is the last one. A job's
procedures are the objects of :mod:`certsel.policies.procedures`, which the tests check against these.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_level

def _check_evalues(evalues) -> np.ndarray:
    e = np.asarray(evalues, dtype=np.float64)
    if e.ndim == 0 or e.shape[-1] == 0:
        raise ValueError("evalues must have a non-empty candidate axis")
    if np.any(np.isnan(e)) or np.any(e < 0):
        raise ValueError("evalues must be non-negative and not NaN")
    return e


def p_values(evalues) -> np.ndarray:
    """Anytime-valid p-values p = min(1, 1/E) from running-maximum e-values."""
    e = _check_evalues(evalues)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, 1.0 / e)


def fixed_sequence(evalues, delta: float, order=None) -> np.ndarray:
    """Certified mask of fixed-sequence testing at level delta: the longest prefix of ``order`` (default: the given
    order) whose members all have E >= 1/delta."""
    delta = check_level(delta, "delta")
    e = _check_evalues(evalues)
    K = e.shape[-1]
    order = np.arange(K) if order is None else _check_order(order, K)
    passed = e[..., order] >= 1.0 / delta
    prefix = np.cumprod(passed, axis=-1).astype(bool)
    out = np.zeros_like(passed)
    out[..., order] = prefix
    return out


def bonferroni(evalues, delta: float) -> np.ndarray:
    """Certified mask of the Bonferroni procedure: E_k >= K / delta."""
    delta = check_level(delta, "delta")
    e = _check_evalues(evalues)
    return e >= e.shape[-1] / delta


def holm(evalues, delta: float) -> np.ndarray:
    """Certified mask of Holm's step-down procedure on p_k = min(1, 1/E_k)."""
    delta = check_level(delta, "delta")
    p = p_values(evalues)
    K = p.shape[-1]
    idx = np.argsort(p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, idx, axis=-1)
    thresholds = delta / (K - np.arange(K))
    prefix = np.cumprod(sorted_p <= thresholds, axis=-1).astype(bool)
    out = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(out, idx, prefix, axis=-1)
    return out


def select(certified, objective) -> np.ndarray:
    """Index of the certified candidate with the smallest objective (e.g. model size), -1 where none is certified; ties
    go to the lower index."""
    c = np.asarray(certified, dtype=bool)
    obj = np.asarray(objective, dtype=np.float64)
    if obj.shape != c.shape[-1:]:
        raise ValueError(f"objective needs one value per candidate ({c.shape[-1]}), got {obj.shape}")
    if np.any(np.isnan(obj)):
        raise ValueError("objective contains NaN")
    masked = np.where(c, obj, np.inf)
    best = np.argmin(masked, axis=-1)
    return np.where(c.any(axis=-1), best, -1)


def _check_order(order, K: int) -> np.ndarray:
    o = np.asarray(order)
    if o.shape != (K,) or not np.issubdtype(o.dtype, np.integer) or set(o.tolist()) != set(range(K)):
        raise ValueError(f"order must be a permutation of 0..{K - 1}")
    return o
