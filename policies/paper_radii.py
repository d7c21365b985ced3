"""The Cer-Eval paper's own intervals (``radius="paper"``): per-group closed-form radii and a union bound.

Seq uses the adaptive Hoeffding radius of Lemma B.3 on a uniformly random order (Algorithm 3). Cer-Eval runs Algorithm 1
literally: the 1-NN partition of Algorithm 2 fitted on the labelled items and applied to every item (labelled ones
included), the per-group adaptive empirical-Bernstein radius of lines 10-11 at a union-bound share of delta, the
stratified interval sum_k N_k/N * (mean_k +- eps_k), and the next label from the group whose radius shrinks the most
(line 18).

Kept to reproduce the published numbers. The guarantee is exact for Seq and for a partition fixed before any label, not
for one fitted to the labels: a labelled item is grouped by its own loss, so the per-group samples are not random draws
from their groups, and every refit starts new per-group sequences outside the union bound.
:mod:`certsel.policies.stratified` is the exactly valid engine (``radius="betting"``).
"""

from __future__ import annotations

import math

import numpy as np

from .radius import _adaptive_hoeffding, _bernstein
from .strata import group_queues


class GroupRadii:
    """Per-group (count, sum, sum of squares) and the paper's radius of each group."""

    def __init__(self, kind: str, n_groups: int, delta: float):
        if kind not in ("hoeffding", "bernstein"):
            raise ValueError(f"unknown paper radius {kind!r}")
        self.kind = kind
        self.K = n_groups
        self.delta = delta
        self.acc = np.zeros((3, n_groups))

    def counts(self) -> np.ndarray:
        return self.acc[0]

    def add(self, k: int, x: float) -> None:
        self.acc[0, k] += 1.0
        self.acc[1, k] += x
        self.acc[2, k] += x * x

    def rebuild(self, x: np.ndarray, groups: np.ndarray, n_groups: int) -> None:
        self.K = n_groups
        self.acc = np.vstack([
            np.bincount(groups, minlength=n_groups).astype(np.float64),
            np.bincount(groups, weights=x, minlength=n_groups),
            np.bincount(groups, weights=x * x, minlength=n_groups),
        ]) if x.size else np.zeros((3, n_groups))

    def _mean_var(self):
        """Mean and variance per group, 1/2 and 1/4 (the worst case) for empty groups."""
        n = self.acc[0]
        m = np.maximum(n, 1.0)
        mean = np.where(n > 0, self.acc[1] / m, 0.5)
        var = np.where(n > 0, np.maximum(self.acc[2] / m - mean * mean, 0.0), 0.25)
        return mean, var

    def means_variances(self):
        """Mean and variance per group, NaN for empty groups (for reports)."""
        mean, var = self._mean_var()
        empty = self.acc[0] == 0
        return np.where(empty, np.nan, mean), np.where(empty, np.nan, var)

    def intervals(self):
        """(center, radius) per group; empty groups get the trivial (1/2, 1/2)."""
        n = self.acc[0]
        mean, var = self._mean_var()
        if self.kind == "hoeffding":
            rad = _adaptive_hoeffding(n, self.delta)
        else:
            rad = _bernstein(var, n, self.K, self.delta)
        return mean, np.where(n > 0, rad, 0.5)

    def gains(self, weights: np.ndarray, pending: np.ndarray) -> np.ndarray:
        """Weighted reduction of each group's radius from one more label (line 18); ``pending`` labels (requested, not
        received) count as arrived with the current variance estimate."""
        n = self.acc[0] + pending
        m = np.maximum(n, 1.0)
        _, v = self._mean_var()
        gain = _bernstein(v, m, self.K, self.delta) - _bernstein(v, m + 1.0, self.K, self.delta)
        return np.where(n > 0, gain * weights, np.inf)


def stratified_interval(center: np.ndarray, radius: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """sum_k w_k * ([c_k - r_k, c_k + r_k] intersected with [0, 1])."""
    return (float(np.dot(weights, np.clip(center - radius, 0.0, 1.0))),
            float(np.dot(weights, np.clip(center + radius, 0.0, 1.0))))


class PaperEngine:
    """The paper's Seq (``kind="hoeffding"``, one group, random order) or Cer-Eval (``kind="bernstein"``, Algorithm 1)
    for an :class:`~certsel.policies.estimation.EstimationPolicy`."""

    def __init__(self, n_items: int, kind: str, *, delta: float, rng: np.random.Generator):
        self.N = int(n_items)
        self.kind = kind
        self.delta = delta
        self.rng = rng
        self.groups = np.zeros(self.N, dtype=np.int64)
        self.K = 1
        self.sizes = np.array([float(self.N)])
        self.stats = GroupRadii(kind, 1, delta)
        self.build_queues(np.zeros(self.N, dtype=np.int8))

    def build_queues(self, status: np.ndarray) -> None:
        self._queue, self._qpos, self._qend = group_queues(self.groups, self.K, status, self.rng)

    def radius_of(self, losses: np.ndarray, groups: np.ndarray, groups_of_labeled: np.ndarray, K: int) -> float:
        stats = GroupRadii(self.kind, K, self.delta)
        stats.rebuild(losses, groups_of_labeled, K)
        lo, hi = stratified_interval(*stats.intervals(), np.bincount(groups, minlength=K) / self.N)
        return 0.5 * (hi - lo)

    def set_partition(self, groups: np.ndarray, labeled: np.ndarray, losses: np.ndarray, status: np.ndarray) -> None:
        K = int(groups.max()) + 1
        sizes = np.bincount(groups, minlength=K)
        if np.any(sizes == 0):
            raise ValueError(f"partitioner returned {int(np.count_nonzero(sizes == 0))} empty group(s)")
        self.groups = groups.astype(np.int64)
        self.K = K
        self.sizes = sizes.astype(np.float64)
        self.stats.rebuild(losses, self.groups[labeled], K)
        self.build_queues(status)

    def take_uniform(self, batch: int) -> list[int]:
        """The next items of group 0's random order (Seq; Cer-Eval's warm start)."""
        out = self._queue[self._qpos[0]:self._qpos[0] + batch].tolist()
        self._qpos[0] += len(out)
        return out

    def choose(self, batch: int, pending: np.ndarray) -> list[int]:
        """Line 18: the group whose weighted radius shrinks most, ``batch`` times."""
        pend = np.bincount(self.groups[pending], minlength=self.K).astype(np.float64) if pending.size \
            else np.zeros(self.K)
        w = self.sizes / self.N
        out = []
        for _ in range(batch):
            gain = self.stats.gains(w, pend)
            gain[self._qpos >= self._qend] = -np.inf
            k = int(np.argmax(gain))
            if not np.isfinite(gain[k]) and gain[k] < 0:
                break  # every group exhausted
            out.append(int(self._queue[self._qpos[k]]))
            self._qpos[k] += 1
            pend[k] += 1
        return out

    def observe(self, items: np.ndarray, losses: np.ndarray) -> None:
        for i, x in zip(items.tolist(), losses.tolist()):
            self.stats.add(int(self.groups[i]), x)

    def interval(self) -> tuple[float, float]:
        center, rad = self.stats.intervals()
        return stratified_interval(center, rad, self.sizes / self.N)

    def group_stats(self) -> dict:
        center, rad = self.stats.intervals()
        mean, var = self.stats.means_variances()
        return {
            "size": self.sizes.astype(np.int64),
            "labeled": self.stats.counts().astype(np.int64),
            "mean": mean,
            "variance": var,
            "center": center,
            "radius": rad,
        }

    def state_dict(self) -> dict:
        return {"kind": self.kind, "groups": self.groups.copy(), "stats": self.stats.acc.copy(),
                "queue": self._queue.copy(), "qpos": self._qpos.copy(), "qend": self._qend.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.groups = np.asarray(state["groups"], dtype=np.int64)
        self.K = int(self.groups.max()) + 1
        self.sizes = np.bincount(self.groups, minlength=self.K).astype(np.float64)
        self.stats = GroupRadii(self.kind, self.K, self.delta)
        self.stats.acc = np.array(state["stats"], dtype=np.float64).reshape(3, -1)
        self._queue = np.asarray(state["queue"], dtype=np.int64)
        self._qpos = np.asarray(state["qpos"], dtype=np.int64).copy()
        self._qend = np.asarray(state["qend"], dtype=np.int64)


def next_refit(schedule: tuple[float, float], n_labeled: int) -> int:
    """The first a * beta^t above ``n_labeled`` (t = 1, 2, ...): the refit schedule of section 6.2."""
    a, beta = schedule
    t = max(1, math.floor(math.log(max(n_labeled, 1) / a) / math.log(beta)) + 1) if n_labeled >= a else 1
    while a * beta ** t <= n_labeled:  # guard against rounding in the logarithms
        t += 1
    while t > 1 and a * beta ** (t - 1) > n_labeled:
        t -= 1
    return math.ceil(a * beta ** t)
