"""Estimators to audit with FT-Eval: random sampling and Active Bayesian Assessment.

* :func:`random_sampling_estimates`: the running mean of a uniformly random labelled
  subset, the unbiased baseline.
* :func:`active_bayesian_assessment`: Algorithm 2 of FT-Eval (Active Bayesian Assessment
  of LLMs): items grouped by k-means on their embeddings with k chosen by the silhouette
  score, a Beta(1/2, 1/2) prior per group, Thompson-sampled expected variance reduction to
  pick the group, density sampling inside the group, and the posterior-mean estimate
  sum_g p_g alpha_g / (alpha_g + beta_g).

Both return estimates for every labelling budget 1..budget of ``reps`` independent runs,
shaped (reps, budget), vectorised across runs. Losses may be fractional in [0, 1]; a loss
z adds z to alpha_g and 1 - z to beta_g.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from sklearn.neighbors import NearestNeighbors

from certsel.policies._validation import check_losses, check_positive_int
from certsel.policies.partition import check_features


def random_sampling_estimates(losses, budget: int, *, reps: int = 100, seed=None) -> np.ndarray:
    """Running means of ``reps`` uniformly random orders, first ``budget`` labels: (reps, budget)."""
    z = check_losses(losses, "losses", (0.0, 1.0))
    if z.ndim != 1:
        raise ValueError(f"losses must be 1-D, got shape {z.shape}")
    budget = check_positive_int(budget, "budget")
    reps = check_positive_int(reps, "reps")
    if budget > z.size:
        raise ValueError(f"budget {budget} exceeds the {z.size} items")
    rng = np.random.default_rng(seed)
    idx = np.argsort(rng.random((reps, z.size)), axis=1)[:, :budget]
    return np.cumsum(z[idx], axis=1) / np.arange(1, budget + 1)


def silhouette_clusters(features, k_range=(2, 10), *, random_state: int = 0, sample_size: int | None = 2000):
    """k-means labels with k in ``k_range`` (inclusive) maximising the silhouette score."""
    f = check_features(features)
    lo, hi = k_range
    if not (isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer)) and 2 <= lo <= hi < f.shape[0]):
        raise ValueError(f"k_range must be integers 2 <= lo <= hi < n_items, got {k_range!r}")
    best, best_labels, best_k = -np.inf, None, None
    for k in range(lo, hi + 1):
        labels = KMeans(n_clusters=k, n_init=4, random_state=random_state).fit_predict(f)
        score = silhouette_score(f, labels, sample_size=min(sample_size or f.shape[0], f.shape[0]),
                                 random_state=random_state)
        if score > best:
            best, best_labels, best_k = score, labels, k
    return best_labels, best_k


def _density(features: np.ndarray, groups: np.ndarray, n_neighbors: int) -> np.ndarray:
    """Per-item density inside its group: 1 / mean distance to its nearest group members."""
    dens = np.empty(groups.size)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        if idx.size == 1:
            dens[idx] = 1.0
            continue
        k = min(n_neighbors, idx.size - 1)
        dist, _ = NearestNeighbors(n_neighbors=k + 1).fit(features[idx]).kneighbors(features[idx])
        dens[idx] = 1.0 / (dist[:, 1:].mean(axis=1) + 1e-12)
    return dens


def _beta_var(a, b):
    s = a + b
    return a * b / (s * s * (s + 1.0))


def active_bayesian_assessment(losses, features, budget: int, *, reps: int = 100, seed=None, groups=None,
                               k_range=(2, 10), density_neighbors: int = 10, prior=(0.5, 0.5)) -> np.ndarray:
    """Algorithm 2 of FT-Eval, ``reps`` independent runs: posterior-mean estimates (reps, budget).

    ``groups`` overrides the silhouette-selected k-means clusters. Inside a group, items are
    drawn without replacement with probability proportional to their density (the
    Efraimidis-Spirakis keys u^(1/w) give one weighted order per run up front).
    """
    z = check_losses(losses, "losses", (0.0, 1.0))
    if z.ndim != 1:
        raise ValueError(f"losses must be 1-D, got shape {z.shape}")
    f = check_features(features, z.size)
    budget = check_positive_int(budget, "budget")
    reps = check_positive_int(reps, "reps")
    if budget > z.size:
        raise ValueError(f"budget {budget} exceeds the {z.size} items")
    if groups is None:
        groups, _ = silhouette_clusters(f, k_range)
    groups = np.unique(np.asarray(groups), return_inverse=True)[1].reshape(-1)
    if groups.size != z.size:
        raise ValueError(f"groups have {groups.size} entries but there are {z.size} items")
    G = int(groups.max()) + 1
    sizes = np.bincount(groups, minlength=G)
    p = sizes / z.size
    rng = np.random.default_rng(seed)
    dens = _density(f, groups, density_neighbors)
    # weighted order within each group, per run: sort by (group, -key)
    keys = np.log(rng.random((reps, z.size))) / dens
    order = np.lexsort((-keys, np.broadcast_to(groups, keys.shape)), axis=1)
    starts = np.cumsum(sizes) - sizes
    ptr = np.zeros((reps, G), dtype=np.int64)
    a = np.full((reps, G), float(prior[0]))
    b = np.full((reps, G), float(prior[1]))
    rows = np.arange(reps)
    out = np.empty((reps, budget))
    for step in range(budget):
        theta = rng.beta(a, b)
        reward = p * (_beta_var(a, b) - (theta * _beta_var(a + 1.0, b) + (1.0 - theta) * _beta_var(a, b + 1.0)))
        reward[ptr >= sizes] = -np.inf
        g = reward.argmax(axis=1)
        item = order[rows, starts[g] + ptr[rows, g]]
        ptr[rows, g] += 1
        x = z[item]
        a[rows, g] += x
        b[rows, g] += 1.0 - x
        out[:, step] = (p * a / (a + b)).sum(axis=1)
    return out
