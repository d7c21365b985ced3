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

from ._validation import check_positive_int

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
