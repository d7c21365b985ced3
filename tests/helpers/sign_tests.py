"""Vectorised sign tests of paired sequences: the reference the ranking's pair tests are checked
against, and the sign simulations of benchmarks/ft_eval_alpacaeval.py and the null-pair checks.

Two models A and B are compared on the same items through u = (loss_A - loss_B + 1) / 2 in
[0, 1]; E[u] < 1/2 means A has the lower risk. ``betting``: two R-Eval e-processes with target
1/2, one for "A better" on u and one for "B better" on 1 - u, each at delta/2 (Ville: a false
sign, an exact tie included, with probability <= delta). ``seq``: Seq's two-sided interval at
delta (the betting sequence for sampling without replacement, or the paper's adaptive
Hoeffding radius, Lemma B.3) excludes 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.policies._validation import check_level, check_losses
from certsel.policies.autoeval import log_evalue_paths, scheme_rhos
from certsel.policies.radius import adaptive_hoeffding_radius
from certsel.policies.stratified import seq_paths


def paired_losses(loss_a, loss_b) -> np.ndarray:
    """u = (loss_a - loss_b + 1) / 2 in [0, 1] for losses in [0, 1] on the same items."""
    a = check_losses(loss_a, "loss_a", (0.0, 1.0))
    b = check_losses(loss_b, "loss_b", (0.0, 1.0))
    if a.shape != b.shape:
        raise ValueError(f"loss_a and loss_b must be on the same items, got shapes {a.shape} and {b.shape}")
    return (a - b + 1.0) / 2.0


@dataclass(frozen=True)
class SignPaths:
    """``winner``: +1 if "A better" was certified first, -1 if "B better", 0 if neither;
    ``n_used``: the items used when it stopped (the full length if undecided)."""

    winner: np.ndarray
    n_used: np.ndarray


def _first(hit: np.ndarray):
    any_ = hit.any(axis=-1)
    return any_, np.where(any_, hit.argmax(axis=-1) + 1, hit.shape[-1] + 1)


def sign_test_paths(u, *, delta: float, method: str = "betting", betting: str = "up", radius: str = "betting",
                    horizon: int | None = None) -> SignPaths:
    """Sign certification on paired sequences ``u`` of shape (..., n), in order. With
    ``method="seq"`` and ``radius="betting"`` each row must be the whole test set in a uniformly
    random order (its target is the test-set mean)."""
    delta = check_level(delta, "delta")
    if method not in ("betting", "seq") or radius not in ("betting", "paper"):
        raise ValueError(f"method must be betting or seq and radius betting or paper, got {method!r}, {radius!r}")
    u = check_losses(u, "u", (0.0, 1.0))
    n = u.shape[-1]
    if method == "betting":
        kw = {"alpha": 0.5, "delta": delta / 2.0, "rhos": scheme_rhos("r-eval"), "betting": betting, "horizon": horizon}
        thr = np.log(2.0 / delta)
        a_hit, a_t = _first(log_evalue_paths(u, **kw) >= thr)
        b_hit, b_t = _first(log_evalue_paths(1.0 - u, **kw) >= thr)
    else:
        t = np.arange(1, n + 1, dtype=np.float64)
        if radius == "paper":
            center = np.cumsum(u, axis=-1) / t
            rad = adaptive_hoeffding_radius(t, delta)
            low, high = center - rad, center + rad
        else:
            bounds = seq_paths(u.reshape(-1, n), delta=delta).reshape(u.shape + (4,))
            low, high = bounds[..., 2], bounds[..., 3]  # two-sided: delta/2 per direction
        a_hit, a_t = _first(high < 0.5)
        b_hit, b_t = _first(low > 0.5)
    winner = np.where(a_hit & (a_t <= b_t), 1, np.where(b_hit, -1, 0))
    n_used = np.where(winner != 0, np.minimum(a_t, b_t), n)
    return SignPaths(winner.astype(np.int64), n_used.astype(np.int64))
