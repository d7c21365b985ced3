"""Synthetic test sets of section 6.1 of Cer-Eval (scenarios S1, S2, S3).

K groups of equal size; in group k the features are N(c_k, sigma^2 I) with
c_k = (lambda k, 0, ..., 0) and the loss is a Gaussian with mean (k - 1/2)/K and variance
1/K^2 truncated to [0, 1] (scipy.stats.truncnorm). S1: K = 1. S2: K = 3, lambda = 5
(groups easy to tell apart). S3: K = 3, lambda = 1 (hard). d = 10, sigma^2 = 1, n = 5000.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import truncnorm

from certsel.policies._validation import check_positive_int

SCENARIOS = {"S1": (1, 5.0), "S2": (3, 5.0), "S3": (3, 1.0)}


@dataclass(frozen=True)
class Scenario:
    features: np.ndarray  # (n, d)
    losses: np.ndarray  # (n,)
    groups: np.ndarray  # (n,) the true partition
    population_mean: float  # R: the mean of the loss distribution


def _loss_distribution(k: int, K: int):
    mean, sd = (k - 0.5) / K, 1.0 / K
    return truncnorm((0.0 - mean) / sd, (1.0 - mean) / sd, loc=mean, scale=sd)


def make_scenario(name: str, *, n: int = 5000, d: int = 10, sigma2: float = 1.0, seed=None) -> Scenario:
    """Draw one test set of scenario ``name`` ("S1", "S2" or "S3")."""
    if name not in SCENARIOS:
        raise ValueError(f"scenario must be one of {sorted(SCENARIOS)}, got {name!r}")
    n = check_positive_int(n, "n")
    d = check_positive_int(d, "d")
    K, lam = SCENARIOS[name]
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(K), -(-n // K))[:n]
    groups = groups[rng.permutation(n)]
    centers = np.zeros((K, d))
    centers[:, 0] = lam * np.arange(1, K + 1)
    features = centers[groups] + np.sqrt(sigma2) * rng.standard_normal((n, d))
    losses = np.empty(n)
    for k in range(K):
        idx = np.flatnonzero(groups == k)
        losses[idx] = _loss_distribution(k + 1, K).rvs(size=idx.size, random_state=rng)
    pop = float(np.mean([_loss_distribution(k + 1, K).mean() for k in range(K)]))
    return Scenario(features, losses, groups, pop)


def make_separated(*, n: int = 5000, d: int = 10, means=(0.1, 0.5, 0.9), sds=(0.03, 0.3, 0.03), lam: float = 5.0,
                   seed=None) -> Scenario:
    """Well-separated strata with unequal variances: K equal groups at c_k = (lam k, 0, ...)
    (as in S2), loss in group k a Gaussian with mean ``means[k]`` and sd ``sds[k]`` truncated
    to [0, 1]. Between-group variance dominates and one group varies far more than the
    others: the case stratified sampling with Neyman allocation is built for."""
    n = check_positive_int(n, "n")
    d = check_positive_int(d, "d")
    if len(means) != len(sds) or not means:
        raise ValueError("means and sds must be non-empty and of equal length")
    K = len(means)
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(K), -(-n // K))[:n]
    groups = groups[rng.permutation(n)]
    centers = np.zeros((K, d))
    centers[:, 0] = lam * np.arange(1, K + 1)
    features = centers[groups] + rng.standard_normal((n, d))
    losses = np.empty(n)
    dists = [truncnorm((0.0 - m) / s, (1.0 - m) / s, loc=m, scale=s) for m, s in zip(means, sds)]
    for k in range(K):
        idx = np.flatnonzero(groups == k)
        losses[idx] = dists[k].rvs(size=idx.size, random_state=rng)
    pop = float(np.mean([dist.mean() for dist in dists]))
    return Scenario(features, losses, groups, pop)


def make_outliers(*, n: int = 3000, d: int = 10, hard: float = 0.3, distance: float = 5.0, hard_error: float = 0.8,
                  easy_error: float = 0.05, seed=None) -> Scenario:
    """Isolated hard items: a fraction ``hard`` of the items sit alone at random points at
    ``distance`` from a standard-normal cluster of easy items, so a hard item's nearest
    neighbour is usually an easy item. 0/1 losses with error rates ``hard_error`` and
    ``easy_error``. A 1-NN partition fitted on the labelled items and applied to them puts
    every labelled item in the group of its own loss: the adversarial case for Cer-Eval's
    per-group union bound."""
    n = check_positive_int(n, "n")
    d = check_positive_int(d, "d")
    rng = np.random.default_rng(seed)
    groups = (rng.random(n) < hard).astype(np.int64)
    features = rng.standard_normal((n, d))
    direction = rng.standard_normal((n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    features[groups == 1] = distance * direction[groups == 1]
    losses = (rng.random(n) < np.where(groups == 1, hard_error, easy_error)).astype(np.float64)
    return Scenario(features, losses, groups, float(hard * hard_error + (1 - hard) * easy_error))


class RefitEveryLabel:
    """An adversarial partitioner for validity simulations: the pool is split by the loss of
    each item's nearest labelled item on a 1-d feature ``x``, into a number of groups that
    itself depends on the labels seen, and it is meant to be refitted after every label
    (``CerEval(..., schedule=(a, 1 + 1e-9))``). Anything computed from the past is allowed,
    so the certificate must hold."""

    adaptive = True

    def __init__(self, x):
        self.x = np.asarray(x, dtype=np.float64)
        self.n_items = self.x.size

    def partition(self, labeled, losses, score_fn, rng):
        order = np.argsort(self.x[labeled])
        xs, zs = self.x[labeled][order], np.asarray(losses)[order]
        pos = np.clip(np.searchsorted(xs, self.x), 0, xs.size - 1)
        k = 2 + int(10 * np.mean(losses)) % 4
        return np.minimum((zs[pos] * k).astype(np.int64), k - 1)
