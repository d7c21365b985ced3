"""Partition subroutines for Cer-Eval (Algorithm 1 line 4, Algorithm 2).

A partitioner maps the test set's items to groups ``0..K-1``, given the items labelled so far (in labelling order),
their losses, a function scoring a candidate partition (lower is better: the predicted spread of the stratified
observation, or the paper's total radius) and the policy's random generator.

Cer-Eval draws its next items from the groups of the unlabelled items, so any partition computed from past labels keeps
its certificate exact (:mod:`certsel.policies.stratified`). The groups of *labelled* items only feed the per-group means
and spreads that steer the allocation; a partitioner should assign them as it would an unlabelled item (never by the
item's own loss), or the allocation is steered by an optimistic picture. :class:`FixedPartition` ignores the labels,
:class:`ScorePartition` bins a per-item score known in advance (a judge's loss), and :class:`NearestNeighborPartition`
is the adaptive 1-NN subroutine of Algorithm 2.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
# scikit-learn is imported where it is used: it takes over a second to import, which every
# command line call (and every error message) would otherwise pay

ScoreFn = Callable[[np.ndarray, np.ndarray, int], float]
"""score_fn(group_of_each_item (N,), group_of_each_labelled_item (in order), K) -> score, lower is better."""


class Partitioner(Protocol):
    adaptive: bool
    n_items: int

    def partition(
        self, labeled: np.ndarray, losses: np.ndarray, score_fn: ScoreFn, rng: np.random.Generator
    ) -> np.ndarray: ...


def _encode(labels: np.ndarray) -> np.ndarray:
    """Relabel to 0..K-1 in order of first appearance of the sorted unique values."""
    _, inverse = np.unique(labels, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1)


class FixedPartition:
    """A partition known before any label (user groups, judge-score bins, oracle groups): one hashable label per item.

    The groups do not depend on the losses, which also makes the paper's per-group union bound exact.
    """

    adaptive = False

    def __init__(self, labels):
        a = np.asarray(labels)
        if a.ndim != 1 or a.size == 0:
            raise ValueError(f"partition labels must be a non-empty 1-D array, got shape {a.shape}")
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise ValueError("partition labels contain NaN or infinite values")
        if a.dtype == object and any(v is None for v in a):
            raise ValueError("partition labels contain missing values (None)")
        self.labels = _encode(a)
        self.n_items = int(a.size)
        self.n_groups = int(self.labels.max()) + 1

    def partition(self, labeled, losses, score_fn, rng) -> np.ndarray:
        return self.labels


def _check_scores(scores) -> np.ndarray:
    """Per-item scores as a finite 1-D float array (a new array: the caller's is not kept)."""
    s = np.array(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"scores contain {int(np.count_nonzero(~np.isfinite(s)))} NaN or infinite value(s)")
    return s


def _check_groups(n, name: str) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")


def score_partition(scores, n_groups: int) -> FixedPartition:
    """Equal-mass bins of a per-item score known in advance (e.g. a judge's predicted loss); raises if a bin would be
    empty."""
    s = _check_scores(scores)
    _check_groups(n_groups, "n_groups")
    edges = np.quantile(s, np.linspace(0.0, 1.0, n_groups + 1)[1:-1])
    labels = np.searchsorted(edges, s, side="right")
    counts = np.bincount(labels, minlength=n_groups)
    if np.any(counts == 0):
        raise ValueError(
            f"score_partition: {int(np.count_nonzero(counts == 0))} of {n_groups} groups would be empty; "
            "use fewer groups"
        )
    return FixedPartition(labels)


_SORTED_MAX = 2048  # test sets up to this size keep every item's neighbours sorted (N^2 int32)
_SORTED_CACHE: dict = {}


def _sorted_others(features: np.ndarray) -> np.ndarray:
    """(N, N-1): for every item the other items by increasing distance (ties by index), cached per feature matrix so
    that many policies (the pairs of a ranking) share one."""
    key = (features.shape, hashlib.sha1(np.ascontiguousarray(features).tobytes()).hexdigest())
    order = _SORTED_CACHE.get(key)
    if order is None:
        N = features.shape[0]
        from sklearn.metrics.pairwise import euclidean_distances

        d = euclidean_distances(features, squared=True)
        d[np.arange(N), np.arange(N)] = -np.inf  # the item itself first, then dropped
        order = np.argsort(d, axis=1, kind="stable")[:, 1:].astype(np.int32)
        if len(_SORTED_CACHE) >= 4:
            _SORTED_CACHE.pop(next(iter(_SORTED_CACHE)))
        _SORTED_CACHE[key] = order
    return order


def check_features(features, n_items: int | None = None) -> np.ndarray:
    """Item features (embeddings): a finite 2-D float array with one row per item."""
    try:
        f = np.asarray(features, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("features must be a numeric 2-D array") from None
    if f.ndim != 2 or f.shape[0] == 0 or f.shape[1] == 0:
        raise ValueError(f"features must be a non-empty 2-D array (items x dims), got shape {f.shape}")
    if not np.all(np.isfinite(f)):
        bad = int(np.count_nonzero(~np.all(np.isfinite(f), axis=1)))
        raise ValueError(f"features contain NaN or infinite values in {bad} row(s)")
    if n_items is not None and f.shape[0] != n_items:
        raise ValueError(f"features have {f.shape[0]} rows but there are {n_items} items")
    return f


def _value_bins(s: np.ndarray, k: int) -> np.ndarray:
    """Up to k bins of about equal mass of ``s``; equal values share a bin (k or fewer distinct values: one bin each).
    """
    if k <= 1:
        return np.zeros(s.size, dtype=np.int64)
    values = np.unique(s)
    if values.size <= k:
        return np.searchsorted(values, s).astype(np.int64)
    # each edge is a value of s and the top of its bin
    edges = np.unique(np.quantile(s, np.linspace(0.0, 1.0, k + 1)[1:-1], method="lower"))
    return _encode(np.searchsorted(edges, s, side="left"))


class ScorePartition:
    """Strata of a per-item score known before any label, such as the judge's loss or score.

    The candidates are 1..``max_groups`` equal-mass bins of the score (tied scores share a bin); each refit uses the one
    with the best score. The bins never depend on the labels, only the choice among them, so every item, labelled or
    not, is grouped by its score alone.
    """

    adaptive = True

    def __init__(self, scores, *, max_groups: int = 8):
        s = _check_scores(scores)
        _check_groups(max_groups, "max_groups")
        self.scores = s
        self.n_items = int(s.size)
        self.max_groups = int(max_groups)
        self._candidates = []
        for k in range(1, self.max_groups + 1):
            labels = _value_bins(s, k)
            if not any(np.array_equal(labels, c) for c in self._candidates):
                self._candidates.append(labels)

    def partition(self, labeled, losses, score_fn, rng) -> np.ndarray:
        labeled = np.asarray(labeled, dtype=np.int64)
        best, best_labels = math.inf, self._candidates[0]
        for labels in self._candidates:
            r = score_fn(labels, labels[labeled], int(labels.max()) + 1)
            if r < best:
                best, best_labels = r, labels
        return best_labels


class NearestNeighborPartition:
    """Algorithm 2: partition by nearest neighbours among the labelled items.

    Every item gets a predicted loss from its nearest labelled items; for k = 1 .. ceil(ln |S|) + 1 the items are
    grouped by floor(k * predicted loss) (capped at k - 1), and the k with the best score wins. :meth:`partition`
    (``radius="betting"``) averages the ``n_neighbors`` nearest labelled items, never the item itself (leave-one-out),
    so a labelled item is grouped as an unlabelled one would be; 20 neighbours group items by their neighbourhood's
    error rate rather than one 0/1 outcome (about a quarter fewer labels on well-separated clusters,
    ``docs/cer_eval.md``). :meth:`paper_partition` is the literal Algorithm 2 (``radius="paper"``): 1-NN trained on a
    random ``subset_fraction`` of the labelled items, whose own training items land in the group of their own loss.

    ``train_fraction``: share of the labelled items neighbours come from (default all); ``max_train`` caps the training
    set (O(n_items * max_train * d) per partition); ``n_components``: PCA dimensions the features are projected on once
    (384-d sentence embeddings lose little neighbour structure at 32, and the search is ten times cheaper).
    """

    adaptive = True

    def __init__(self, features, *, subset_fraction: float = 0.5, max_train: int | None = 2048,
                 n_components: int | None = None, random_state: int = 0, n_neighbors: int = 20,
                 train_fraction: float = 1.0):
        f = check_features(features)
        if not 0.0 < float(subset_fraction) <= 1.0:
            raise ValueError(f"subset_fraction must be in (0, 1], got {subset_fraction!r}")
        if max_train is not None and (not isinstance(max_train, (int, np.integer)) or max_train < 1):
            raise ValueError(f"max_train must be a positive integer or None, got {max_train!r}")
        if n_components is not None:
            if not isinstance(n_components, (int, np.integer)) or not 1 <= n_components <= min(f.shape):
                raise ValueError(f"n_components must be an integer in [1, {min(f.shape)}], got {n_components!r}")
            from sklearn.decomposition import PCA

            f = PCA(n_components=int(n_components), random_state=random_state).fit_transform(f)
        self.features = np.ascontiguousarray(f, dtype=np.float32)
        self.n_items = int(f.shape[0])
        if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)) or n_neighbors < 1:
            raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors!r}")
        if not 0.0 < float(train_fraction) <= 1.0:
            raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
        self.subset_fraction = float(subset_fraction)
        self.max_train = max_train
        self._order = None  # every item's other items by distance (small test sets), on first use
        self.n_neighbors = int(n_neighbors)
        self.train_fraction = float(train_fraction)

    def _neighbour_losses(self, labeled, z, rng, *, leave_one_out: bool, fraction: float, k: int):
        """The mean loss of every item's ``k`` nearest training items (a random ``fraction`` of the labelled; its own
        row excluded with ``leave_one_out``)."""
        m = labeled.size
        size = max(1, math.ceil(fraction * m))
        if self.max_train is not None:
            size = min(size, int(self.max_train))
        train = np.sort(rng.choice(m, size=size, replace=False))
        train_items = labeled[train]
        k = max(1, min(k, size - 1 if leave_one_out else size))
        if leave_one_out and size > 1 and self.n_items <= _SORTED_MAX:
            return self._sorted_neighbour_losses(train_items, z[train], k)
        q = k + 1 if leave_one_out and size > 1 else k
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=q, algorithm="brute").fit(self.features[train_items])
        nearest = nn.kneighbors(self.features, return_distance=False)
        if q > k:
            # a training item's nearest training item is itself (or, with duplicated features,
            # a tie at distance 0): drop its own row wherever it is, else the farthest one
            own = np.full(self.n_items, -1, dtype=np.int64)
            own[train_items] = np.arange(size)
            drop = nearest == own[:, None]
            drop[~drop.any(axis=1), -1] = True
            nearest = nearest[~drop].reshape(self.n_items, k)
        return z[train][nearest].mean(axis=1)

    def _sorted_neighbour_losses(self, train_items, z_train, k):
        """:meth:`_neighbour_losses` (leave-one-out) from every item's other items sorted by distance, computed once per
        feature matrix: up to _SORTED_MAX items cost a few array passes per refit instead of a neighbour search."""
        if self._order is None:
            self._order = _sorted_others(self.features)
        order = self._order
        member = np.zeros(self.n_items, dtype=bool)
        member[train_items] = True
        value = np.zeros(self.n_items)
        value[train_items] = z_train
        width = min(order.shape[1], 4 * k * self.n_items // max(1, train_items.size) + k)
        while True:
            inrow = member[order[:, :width]]
            counts = np.cumsum(inrow, axis=1, dtype=np.int32)
            if width == order.shape[1] or counts[:, -1].min() >= k:
                break
            width = min(order.shape[1], 2 * width)
        first_k = inrow & (counts <= k)
        return np.where(first_k, value[order[:, :width]], 0.0).sum(axis=1) / k

    def _best_bins(self, z_nn, labeled, score_fn, m):
        best, best_labels = math.inf, None
        for k in range(1, math.ceil(math.log(m)) + 2):
            raw = np.minimum(np.floor(k * z_nn), k - 1).astype(np.int64)
            labels = _encode(raw)
            K = int(labels.max()) + 1
            r = score_fn(labels, labels[labeled], K)
            if r < best:
                best, best_labels = r, labels
        return best_labels

    def partition(self, labeled, losses, score_fn, rng) -> np.ndarray:
        labeled = np.asarray(labeled, dtype=np.int64)
        z = np.asarray(losses, dtype=np.float64)
        if labeled.size == 0:
            return np.zeros(self.n_items, dtype=np.int64)
        z_nn = self._neighbour_losses(labeled, z, rng, leave_one_out=True, fraction=self.train_fraction,
                                      k=self.n_neighbors)
        return self._best_bins(z_nn, labeled, score_fn, labeled.size)

    def paper_partition(self, labeled, losses, score_fn, rng) -> np.ndarray:
        """Algorithm 2 as published: a training item is classified as itself."""
        labeled = np.asarray(labeled, dtype=np.int64)
        z = np.asarray(losses, dtype=np.float64)
        if labeled.size == 0:
            return np.zeros(self.n_items, dtype=np.int64)
        z_nn = self._neighbour_losses(labeled, z, rng, leave_one_out=False, fraction=self.subset_fraction, k=1)
        return self._best_bins(z_nn, labeled, score_fn, labeled.size)
