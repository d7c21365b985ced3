"""What an oracle would spend on a full ranking: the yardstick of ``labels.oracle`` for a ranking job and of
``benchmarks/ranking_ties.py``.

The oracle knows each pair's per-item standard deviation s of the loss difference and decides the pair after n of the N
items once z s sqrt((N - n) / ((N - 1) n)) -- the normal bound for the mean of n items drawn without replacement,
z = z_(level) -- falls below its margin: |Delta| to order it, epsilon - |Delta| to tie it. Settling a pair (a, b) takes
model a into one decision of its own: the pair itself (ordered or tied, whichever is cheaper), or, for an order implied
through a chain a < c < ... < b, a's order with c, which lies strictly between a and b. A tie is never implied, and an
order with a model tied to a costs what ordering that near-tie costs, so a model's need is, over its pairs, the cheapest
of these ways, and at least its furthest such pair. Any valid test needs about this much or more (a normal approximation
of the limit, which an anytime-valid test pays more than).
"""

from __future__ import annotations

import numpy as np


def ranking_need(means: np.ndarray, gaps: np.ndarray, sds: np.ndarray, n_items: int, level: float,
                 epsilon: float | None) -> np.ndarray:
    """Items each model needs for a full ranking (K,): ``means`` (K,) the models' mean losses, ``gaps``, ``sds`` (K, K)
    each pair's |mean difference| and per-item sd of the difference, ``level`` each pair's one-sided level (per
    direction)."""
    from scipy.stats import norm  # here: the driver imports this module, and scipy.stats costs a CLI start 0.3 s

    z = norm.isf(level)
    n = np.arange(1, n_items + 1)
    half_width = z * np.sqrt((n_items - n) / max(n_items - 1, 1) / n)  # times s

    def items(margin: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Items until z s half_width <= margin, elementwise (n_items where never)."""
        ok = half_width[None, :] * s.reshape(-1, 1) <= margin.reshape(-1, 1)
        ok &= margin.reshape(-1, 1) > 0
        return np.where(ok.any(axis=1), n[np.argmax(ok, axis=1)], n_items).reshape(margin.shape)

    distinct = means[:, None] != means[None, :]
    order = np.where(distinct, items(gaps, sds), n_items)  # an exact tie is never ordered
    tie = items(np.maximum(epsilon - gaps, 0.0), sds) if epsilon else np.full_like(order, n_items)
    direct = np.minimum(order, tie)
    lo, hi = np.minimum(means[:, None], means[None, :]), np.maximum(means[:, None], means[None, :])
    between = (means[None, None, :] > lo[:, :, None]) & (means[None, None, :] < hi[:, :, None])  # [a, b, c]
    # a's cheapest first step of an implied order a < c < ... < b: its order with c
    via = np.where(between, order[:, None, :], n_items + 1).min(axis=2)
    settle = np.minimum(direct, via)
    np.fill_diagonal(settle, 0)
    return settle.max(axis=1).astype(np.int64)


def table_moments(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means, gaps, sds) of a whole loss table (K, N): what an oracle knows."""
    d = losses[:, None, :] - losses[None, :, :]
    return losses.mean(axis=1), np.abs(d.mean(axis=-1)), d.std(axis=-1)


def labelled_moments(labels: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means, gaps, sds) estimated from each model's labels, a list of (items, losses): means over each model's own
    labels, pair moments over the items both labelled (fewer than two shared items: undecided, gap 0, sd 0.5)."""
    K = len(labels)
    means = np.array([float(loss.mean()) if loss.size else np.nan for _, loss in labels])
    gaps, sds = np.zeros((K, K)), np.full((K, K), 0.5)
    for a in range(K):
        for b in range(a + 1, K):
            common, ia, ib = np.intersect1d(labels[a][0], labels[b][0], return_indices=True)
            if common.size >= 2:
                d = labels[a][1][ia] - labels[b][1][ib]
                gaps[a, b] = gaps[b, a] = abs(float(d.mean()))
                sds[a, b] = sds[b, a] = float(d.std())
    return means, gaps, sds
