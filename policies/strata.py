"""The stratified design of :mod:`.stratified`, piece by piece: the groups' item queues, shrunk moments, the
allocation pi_k with its floor, and the observation Y_t of a draw with its range known before it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Widening of the known-for-certain bounds so that rounding in the running sums never decides anything (the exhausted
# interval is [mu - 1e-9, mu + 1e-9], not a rounded point on one side of mu).
KNOWN_TOL = 1e-9
DEFAULT_FLOOR = 0.25  # pi_k >= floor * |P_k| / |P|: bounds every draw's weight by 1/floor
_PRIOR_MEAN, _PRIOR_VAR = 0.5, 0.25  # one pseudo-observation at the worst case for a [0, 1] loss
# per-draw design record, columns of self._design
_K, _FAC, _CTL, _BASE, _LO, _HI, _VAR = range(7)


def group_queues(groups: np.ndarray, K: int, status: np.ndarray, rng: np.random.Generator):
    """For every group its undrawn items (``status == 0``) in a uniformly random order: one array ``queue`` holding the
    groups one after another, group k's next item at ``queue[pos[k]]`` and its end at ``end[k]``. Taking from the front
    of a group's queue is a uniform draw among its remaining items, whatever was observed since the shuffle."""
    free = np.flatnonzero(status == 0)
    free = free[rng.permutation(free.size)]
    queue = free[np.argsort(groups[free], kind="stable")]
    counts = np.bincount(groups[free], minlength=K)
    end = np.cumsum(counts)
    return queue, end - counts, end


def shrunk_moments(moments: np.ndarray, prior_mean=None, prior_weight: float = 1.0):
    """Predictable group means and variances from (count, sum, sum of squares) rows.

    One pseudo-observation at mean 1/2 and variance 1/4 (the widest for a [0, 1] loss) keeps a rarely seen group from
    looking certain. ``prior_mean`` (per group, e.g. the judge's mean loss there) with ``prior_weight``
    pseudo-observations replaces the mean's pseudo-observation: the controls start at what the judge says and move to
    the human labels (the variance keeps its worst-case one).
    """
    n, s, ss = moments
    if prior_mean is None:
        mean = (_PRIOR_MEAN + s) / (n + 1.0)
    else:
        mean = (prior_weight * prior_mean + s) / (n + prior_weight)
    dev = np.maximum(ss - s * s / np.maximum(n, 1.0), 0.0)  # sum of squared deviations
    var = (_PRIOR_VAR + dev) / (n + 1.0)
    return mean, var


def allocation(pool: np.ndarray, spread: np.ndarray, floor: float) -> np.ndarray:
    """Draw probabilities pi_k = floor * |P_k|/|P| + (1 - floor) * (Neyman share |P_k| spread_k / sum).

    Every group with items left gets at least ``floor`` times its proportional share, so |P_k| / (N pi_k) <= |P| / (N
    floor); groups with an empty pool get 0.
    """
    share = pool / pool.sum()
    w = pool * spread
    total = w.sum()
    neyman = share if total <= 0 else w / total
    return floor * share + (1.0 - floor) * neyman


def neyman_score(pool: np.ndarray, moments: np.ndarray) -> float:
    """Predicted standard deviation of one stratified observation per unit of pool weight,
    sum_k (|P_k|/|P|) sd_k: what Algorithm 2's choice of K minimises here."""
    _, var = shrunk_moments(moments)
    return float(np.dot(pool / max(pool.sum(), 1.0), np.sqrt(var)))


def one_group_design(sizes, mean, var, N: int, pi) -> np.ndarray:
    """Design records (columns _K.._VAR) of draws from one group whose pool holds ``sizes`` items before each draw, with
    the group's control ``mean``, predicted variance ``var`` and probability ``pi`` (broadcast against
    ``sizes[..., :1]``)."""
    fac = sizes / (float(N) * pi)
    shape = np.broadcast_shapes(fac.shape, np.shape(mean), np.shape(var))
    fac, mean = np.broadcast_to(fac, shape), np.broadcast_to(mean, shape)
    return np.stack([np.zeros_like(fac), fac, mean, sizes * mean / float(N), fac * -mean, fac * (1.0 - mean),
                     pi * fac * fac * var], axis=-1)


def draw_observations(z, d, prev_sum, drawn: int, N: int):
    """What :class:`~certsel.policies.confseq.BettingCS` is fed for consecutive draws with labels ``z`` (..., T) and
    design records ``d`` (..., T, 7) after ``drawn`` earlier draws summing to ``prev_sum``: (y, lo, hi, v, known_lo,
    known_hi, before, total), each (..., T) but ``total`` (the labels' sum after the last draw, (...))."""
    N = float(N)
    # running sums in draw order, rounded as one-by-one updates would be
    run = np.cumsum(np.concatenate([np.asarray(prev_sum, dtype=np.float64)[..., None], z], axis=-1), axis=-1)
    before, after = run[..., :-1], run[..., 1:]
    base = before / N + d[..., _BASE]
    y = base + d[..., _FAC] * (z - d[..., _CTL])
    t = np.arange(drawn + 1, drawn + z.shape[-1] + 1, dtype=np.float64)
    lo, hi = base + d[..., _LO], base + d[..., _HI]
    # y lies in [lo, hi] by construction (the same products); the clip only absorbs rounding
    y = np.minimum(np.maximum(y, lo), hi)
    return y, lo, hi, d[..., _VAR], after / N - KNOWN_TOL, (after + N - t) / N + KNOWN_TOL, before, after[..., -1]


@dataclass(frozen=True)
class Design:
    """What is fixed before one draw: ``pi`` per group, each group's weight |P_k| / (N pi_k) and control c_k, and the
    parts of Y_t that do not depend on the draw (added to S_{t-1}/N): ``base`` = sum_j |P_j| c_j / N, and the range
    offsets min_k / max_k of weight_k (z - c_k) over z in [0, 1]. ``variance``: the predicted Var(Y_t | past) that
    sizes the bet."""

    pi: np.ndarray
    weight: np.ndarray
    control: np.ndarray
    base: float
    lo_offset: float
    hi_offset: float
    variance: float
    # with control scales rho_1..rho_S (controls rho c_k): each scaled observation's range offsets, min_k / max_k of
    # weight_k (z - rho c_k); its base is rho sum_j |P_j| c_j / N
    lo_scaled: np.ndarray | None = None
    hi_scaled: np.ndarray | None = None


@dataclass(frozen=True)
class Observed:
    """Observations that became complete: Y_t and its range [lo_t, hi_t] (full controls), and with control scales the
    same per scale, shape (S, t) (controls rho_s c_k)."""

    y: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    y_scaled: np.ndarray | None = None
    lo_scaled: np.ndarray | None = None
    hi_scaled: np.ndarray | None = None
