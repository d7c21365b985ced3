"""Input validation at the boundary of the statistics package.

Every public entry point of :mod:`certsel.policies` passes its arguments through these helpers, so bad input fails with
a ``ValueError`` naming the argument instead of producing a silently wrong certificate. Nothing is clipped or dropped.
"""

from __future__ import annotations

import numpy as np


def check_level(value: float, name: str) -> float:
    """Return ``value`` as a float, or raise if it is not strictly inside (0, 1)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not np.isfinite(v) or not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return v


def check_target(value: float, bounds: tuple[float, float]) -> float:
    """The target risk alpha: a finite number strictly inside the loss bounds."""
    lo, hi = bounds
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a number in ({lo}, {hi}), got {value!r}") from None
    if not np.isfinite(v) or not lo < v < hi:
        raise ValueError(f"alpha must be in ({lo}, {hi}) (inside the loss bounds), got {value!r}")
    return v


def check_bounds(bounds) -> tuple[float, float]:
    """Validate declared loss bounds ``(lo, hi)`` with ``lo < hi``, both finite."""
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"loss_bounds must be a pair (lo, hi), got {bounds!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi)) or not lo < hi:
        raise ValueError(f"loss_bounds must be finite with lo < hi, got {bounds!r}")
    return lo, hi


def check_losses(x, name: str, bounds: tuple[float, float]) -> np.ndarray:
    """``x`` as a float64 array, checked non-empty, finite and in bounds (last axis: samples; leading axes: batch)."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array") from None
    if a.ndim == 0:
        raise ValueError(f"{name} must be an array with a sample axis, got a scalar")
    if a.size == 0 or a.shape[-1] == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(a)):
        bad = int(np.count_nonzero(~np.isfinite(a)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    lo, hi = bounds
    amin, amax = float(a.min()), float(a.max())
    if amin < lo or amax > hi:
        raise ValueError(
            f"{name} has values outside the declared loss bounds [{lo}, {hi}] "
            f"(min {amin:.6g}, max {amax:.6g})"
        )
    return a


def check_rhos(rhos) -> np.ndarray:
    """Reliance factors: a non-empty, finite 1-D array in [0, 1] without duplicates."""
    r = np.atleast_1d(np.asarray(rhos, dtype=np.float64))
    if r.ndim != 1 or r.size == 0:
        raise ValueError("rhos must be a non-empty 1-D sequence of reliance factors")
    if not np.all(np.isfinite(r)) or r.min() < 0.0 or r.max() > 1.0:
        raise ValueError(f"rhos must lie in [0, 1], got {r.tolist()}")
    if np.unique(r).size != r.size:
        raise ValueError(f"rhos must not contain duplicates, got {r.tolist()}")
    return r


def check_weights(weights, size: int) -> np.ndarray:
    """Initial mixture weights w_{s,0}: strictly positive, one per rho, summing to 1."""
    if weights is None:
        return np.full(size, 1.0 / size)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (size,):
        raise ValueError(f"weights must have one entry per rho ({size}), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("weights must be finite and strictly positive")
    if abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(f"weights must sum to 1, got {w.sum():.12g}")
    return w


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
