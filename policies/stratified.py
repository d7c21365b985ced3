"""Stratified sampling with one betting confidence sequence: the exact engine of Seq and Cer-Eval.

The target is mu = (1/N) sum_i z_i, the mean loss over the N items of the test set. Items are labelled one at a time,
without replacement. Before draw t the policy holds a partition of the items not yet drawn (the pool) into groups
P_1..P_K, and fixes, from past labels only:

* pi_k > 0, the probability of drawing from group k (Neyman-type: proportional to |P_k| times a predictable spread
  estimate, mixed with the proportional share so that every group gets at least ``floor`` times it and no group's weight
  is unbounded), and
* c_k, a control value per group (a shrunk running mean of the group's past labels).

It draws group k with probability pi_k, then an item uniformly from P_k, and records

    Y_t = S_{t-1}/N + sum_j (|P_j|/N) c_j + (|P_k| / (N pi_k)) (z - c_k)

where S_{t-1} is the sum of the labels of all earlier draws. Given the past, the draw is uniform inside P_k, so
E[(z - c_k) | k] = m_k - c_k (m_k the mean of P_k) and

    E[Y_t | past] = S_{t-1}/N + sum_j (|P_j|/N) c_j + sum_k (|P_k|/N) (m_k - c_k) = mu,

exactly, for any partition, allocation and controls chosen from the past (a partition refitted at every step, a 1-NN
classifier trained on the labelled items, judge-score strata). The partition acts on the pool, so an item's group is
never chosen with its own label. Y_t lies in [a_t, b_t] with a_t = S_{t-1}/N + sum_j (|P_j|/N) c_j + min_k (|P_k|/(N
pi_k)) (-c_k) and b_t the same with max_k ... (1 - c_k), known before the draw. One
:class:`~certsel.policies.confseq.BettingCS` on (Y_t) is therefore an anytime-valid confidence sequence for mu with no
split of delta over groups or refits. The labelled part of the test set also puts mu in [S_t/N, (S_t + N - t)/N] with
certainty, and the sequence is intersected with that (after all N items: the test-set mean, widened by 1e-9).

With one group this is sequential sampling without replacement (Seq): Y_t = (S_{t-1} + (N - t + 1) z_t)/N, whose range
is exactly the known-for-certain interval; stratification removes the between-group variance and moves labels to the
groups that vary most.

Labels may arrive in any order; observations are fed to the sequence in draw order once all earlier labels are in, so
every bet only uses what was known before its draw.
"""

from __future__ import annotations

import math

import numpy as np

from .confseq import GRID_SIZE, BettingCS

_FORMAT = 1


from .strata import (_BASE, _CTL, _FAC, _PRIOR_VAR, DEFAULT_FLOOR, KNOWN_TOL, Design, Observed, draw_observations,
                     group_queues, neyman_score, one_group_design, shrunk_moments)


class StratifiedBetting:
    """Sampling design, observations and the betting confidence sequence for one test set.

    The owner (:class:`~certsel.policies.estimation.EstimationPolicy`) keeps the item bookkeeping; this class chooses the
    next draws (:meth:`choose`), turns labels into observations (:meth:`observe`) and holds the bounds.
    """

    def __init__(self, n_items: int, *, delta: float, rng: np.random.Generator, floor: float = DEFAULT_FLOOR,
                 bet_level: float | None = None, grid_size: int = GRID_SIZE, prior_weight: float = 1.0,
                 control_scales=None):
        if not 0.0 < float(floor) <= 1.0:
            raise ValueError(f"floor must be in (0, 1], got {floor!r}")
        if not (np.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight must be positive, got {prior_weight!r}")
        self.N = int(n_items)
        self.floor = float(floor)
        # controls' prior: None (one pseudo-label at 1/2) or one mean per group (set_partition)
        self.prior_mean: np.ndarray | None = None
        self.prior_weight = float(prior_weight)
        self.rng = rng
        self.cs = BettingCS(1, delta=delta, bet_level=bet_level, grid_size=grid_size)
        self.groups = np.zeros(self.N, dtype=np.int64)
        self.K = 1
        self.moments = np.zeros((3, 1))
        self._loss = np.full(self.N, np.nan)
        self._items = np.zeros(self.N, dtype=np.int64)  # draws in order (the first _drawn)
        self._design = np.zeros((self.N, 7))  # one record per draw (columns _K.._VAR)
        # optional control scales rho_s: every draw is also observed with controls rho_s c_k (still unbiased for mu; a
        # smaller rho narrows the range); their range offsets per draw, lo then hi
        self.scales = None if control_scales is None else np.asarray(control_scales, dtype=np.float64).reshape(-1)
        self._scaled = None if self.scales is None else np.zeros((self.N, 2 * self.scales.size))
        self._drawn = 0
        self._processed = 0
        self._sum = 0.0  # labels of the processed draws
        self.build_queues(np.zeros(self.N, dtype=np.int8))

    # -- partition -------------------------------------------------------------------------
    def set_partition(self, groups: np.ndarray, status: np.ndarray, prior_mean=None) -> None:
        """Use ``groups`` (one per item) from now on; ``status`` marks items already drawn. ``prior_mean`` (one per
        group, known before any label): where the controls start."""
        self.groups = np.asarray(groups, dtype=np.int64)
        self.K = int(self.groups.max()) + 1
        self.prior_mean = None if prior_mean is None else np.asarray(prior_mean, dtype=np.float64).reshape(self.K)
        known = np.flatnonzero(~np.isnan(self._loss))
        self.moments = self._moments_of(self.groups, known)
        self.build_queues(status)

    def _moments_of(self, groups: np.ndarray, items: np.ndarray) -> np.ndarray:
        z, g = self._loss[items], groups[items]
        K = int(groups.max()) + 1
        return np.vstack([np.bincount(g, minlength=K).astype(np.float64), np.bincount(g, weights=z, minlength=K),
                          np.bincount(g, weights=z * z, minlength=K)])

    def score(self, groups: np.ndarray, status: np.ndarray) -> float:
        """:func:`neyman_score` of a candidate partition on the current pool and labels."""
        groups = np.asarray(groups, dtype=np.int64)
        K = int(groups.max()) + 1
        pool = np.bincount(groups[status == 0], minlength=K).astype(np.float64)
        return neyman_score(pool, self._moments_of(groups, np.flatnonzero(~np.isnan(self._loss))))

    def build_queues(self, status: np.ndarray) -> None:
        self._queue, self._qpos, self._qend = group_queues(self.groups, self.K, status, self.rng)

    # -- drawing ---------------------------------------------------------------------------------
    def pool_sizes(self) -> np.ndarray:
        return (self._qend - self._qpos).astype(np.float64)

    def allocation(self) -> np.ndarray:
        """The draw probabilities pi_k the next draw would use."""
        return self.design().pi

    def design(self, pool: np.ndarray | None = None, moments=None) -> Design:
        """The design of the next draw given the labels so far (``pool``: pool sizes, default the current ones;
        ``moments`` = (mean, var, spread) when already computed from the same labels)."""
        pool = self.pool_sizes() if pool is None else pool
        mean, var, spread = self._moments() if moments is None else moments
        live = pool > 0
        if not live.any():
            zero = np.zeros(self.K)
            none = None if self.scales is None else np.zeros(self.scales.size)
            return Design(zero, zero, mean, 0.0, 0.0, 0.0, 0.0, none, none)
        # allocation() over the groups with items left (an empty group has weight 0 in every sum)
        share = pool / pool.sum()
        w = pool * spread
        pi = self.floor * share + (1.0 - self.floor) * (w / w.sum())
        N = float(self.N)
        fac = np.divide(pool, N * pi, out=np.zeros(self.K), where=live)
        lo_s = hi_s = None
        if self.scales is not None:  # (S, K): weight_k (z - rho c_k) at z = 0 and z = 1
            ctl = self.scales[:, None] * mean
            lo_s = np.min(np.where(live, fac * -ctl, np.inf), axis=1)
            hi_s = np.max(np.where(live, fac * (1.0 - ctl), -np.inf), axis=1)
        return Design(
            pi, fac, mean, float(np.dot(pool, mean)) / N,
            float(np.min(np.where(live, fac * -mean, np.inf))), float(np.max(np.where(live, fac * (1.0 - mean), -np.inf))),
            float(np.sum(pi * fac * fac * var)), lo_s, hi_s,
        )

    def _moments(self):
        mean, var = shrunk_moments(self.moments, self.prior_mean, self.prior_weight)
        return mean, var, np.sqrt(var)

    def choose(self, batch: int) -> list[int]:
        """Up to ``batch`` draws; each one's design is fixed from the labels known now."""
        pool = self.pool_sizes()
        moments = self._moments()  # the labels do not change within a batch
        if self.K == 1 and self.scales is None:
            return self._choose_one_group(batch, pool, moments)
        out = []
        for _ in range(batch):
            if pool.sum() == 0:
                break
            d = self.design(pool, moments)
            cum = np.cumsum(d.pi)
            k = min(int(np.searchsorted(cum, self.rng.random() * cum[-1], side="right")), self.K - 1)
            while d.pi[k] == 0.0:  # only reachable through rounding at the top end
                k -= 1
            item = int(self._queue[self._qpos[k]])
            self._qpos[k] += 1
            pool[k] -= 1.0
            self._items[self._drawn] = item
            self._design[self._drawn] = (k, d.weight[k], d.control[k], d.base, d.lo_offset, d.hi_offset, d.variance)
            if self._scaled is not None:
                self._scaled[self._drawn] = np.concatenate([d.lo_scaled, d.hi_scaled])
            self._drawn += 1
            out.append(item)
        return out

    def _choose_one_group(self, batch: int, pool: np.ndarray, moments) -> list[int]:
        """:meth:`choose` for one group (Seq), the whole batch at once: the same designs number for number (only the
        pool shrinks) and the same random numbers consumed (one per draw, though one group needs none)."""
        n = int(min(batch, pool[0]))
        if n <= 0:
            return []
        d = self.design(pool, moments)  # pi, control and mean do not depend on the pool size here
        sizes = pool[0] - np.arange(n, dtype=np.float64)  # the pool before each draw
        self.rng.random(n)
        start = int(self._qpos[0])
        items = self._queue[start:start + n]
        self._qpos[0] += n
        rows = slice(self._drawn, self._drawn + n)
        self._items[rows] = items
        self._design[rows] = one_group_design(sizes, moments[0][0], moments[1][0], self.N, d.pi[0])
        self._drawn += n
        return [int(i) for i in items]

    # -- labels ----------------------------------------------------------------------------------
    def observe(self, items: np.ndarray, losses: np.ndarray):
        """Labels of earlier draws (any subset, any order); feeds every draw whose label and all earlier labels are
        known to the confidence sequence, in draw order. Returns the new observations (y, a, b): Y_t and its range
        [a_t, b_t], fixed before draw t (empty when no draw became complete)."""
        got = self.observe_block(items, losses)
        return got.y, got.lo, got.hi

    def observe_block(self, items: np.ndarray, losses: np.ndarray) -> Observed:
        """:meth:`observe`, with the observations at every control scale when there are scales."""
        self._loss[items] = losses
        g = self.groups[items]
        self.moments[0] += np.bincount(g, minlength=self.K)
        self.moments[1] += np.bincount(g, weights=losses, minlength=self.K)
        self.moments[2] += np.bincount(g, weights=losses * losses, minlength=self.K)
        start = self._processed
        stop = start
        while stop < self._drawn and not math.isnan(self._loss[self._items[stop]]):
            stop += 1
        if stop == start:
            empty = None if self.scales is None else np.zeros((self.scales.size, 0))
            return Observed(np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, empty)
        z = self._loss[self._items[start:stop]]
        d = self._design[start:stop]
        ob = draw_observations(z, d, self._sum, start, self.N)
        self.cs.feed(*(x[None] for x in ob[:6]))
        y, lo, hi, before = ob[0], ob[1], ob[2], ob[6]
        self._sum = float(ob[7])
        self._processed = stop
        if self.scales is None:
            return Observed(y, lo, hi)
        N = float(self.N)
        rho = self.scales[:, None]  # (S, 1): controls rho c_k, base rho sum_j |P_j| c_j / N
        base_s = before / N + rho * d[:, _BASE]
        S = self.scales.size
        lo_s, hi_s = base_s + self._scaled[start:stop, :S].T, base_s + self._scaled[start:stop, S:].T
        y_s = np.minimum(np.maximum(base_s + d[:, _FAC] * (z - rho * d[:, _CTL]), lo_s), hi_s)
        return Observed(y, lo, hi, y_s, lo_s, hi_s)

    # -- reading ---------------------------------------------------------------------------------
    def draw_rank(self, items: np.ndarray) -> np.ndarray:
        """Position of each of ``items`` in the draw order."""
        rank = np.full(self.N, -1, dtype=np.int64)
        rank[self._items[:self._drawn]] = np.arange(self._drawn)
        return rank[items]

    @property
    def n_processed(self) -> int:
        return self._processed

    def bounds(self) -> tuple[float, float, float, float]:
        """(one-sided lower, one-sided upper, two-sided lower, two-sided upper) at level delta."""
        lo2, hi2 = self.cs.interval
        return float(self.cs.lower[0]), float(self.cs.upper[0]), float(lo2[0]), float(hi2[0])

    def group_stats(self) -> dict:
        mean, var = shrunk_moments(self.moments, self.prior_mean, self.prior_weight)
        n = self.moments[0]
        return {
            "size": np.bincount(self.groups, minlength=self.K).astype(np.int64),
            "pool": self.pool_sizes().astype(np.int64),
            "labeled": n.astype(np.int64),
            "mean": np.where(n > 0, self.moments[1] / np.maximum(n, 1.0), np.nan),
            "variance": np.where(n > 0, self.moments[2] / np.maximum(n, 1.0)
                                 - (self.moments[1] / np.maximum(n, 1.0)) ** 2, np.nan),
            "allocation": self.allocation(),
            "control": mean,
            "spread": np.sqrt(var),
        }

    # -- snapshot ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "format": _FORMAT, "floor": self.floor, "groups": self.groups.copy(), "moments": self.moments.copy(),
            "loss": self._loss.copy(), "items": self._items[:self._drawn].copy(),
            "design": self._design[:self._drawn].copy(),
            "processed": self._processed, "sum": self._sum, "queue": self._queue.copy(), "qpos": self._qpos.copy(),
            "qend": self._qend.copy(), "cs": self.cs.state_dict(), "prior_weight": self.prior_weight,
            "prior_mean": None if self.prior_mean is None else self.prior_mean.copy(),
            "scales": None if self.scales is None else self.scales.copy(),
            "scaled": None if self._scaled is None else self._scaled[:self._drawn].copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("format") != _FORMAT:
            raise ValueError(f"unsupported stratified state format {state.get('format')!r}")
        self.floor = float(state["floor"])
        self.groups = np.asarray(state["groups"], dtype=np.int64)
        self.K = int(self.groups.max()) + 1
        self.moments = np.array(state["moments"], dtype=np.float64).reshape(3, -1)
        self._loss = np.array(state["loss"], dtype=np.float64)
        items = np.asarray(state["items"], dtype=np.int64).reshape(-1)
        self._drawn = items.size
        self._items = np.zeros(self.N, dtype=np.int64)
        self._items[:self._drawn] = items
        self._design = np.zeros((self.N, 7))
        self._design[:self._drawn] = np.array(state["design"], dtype=np.float64).reshape(-1, 7)
        self._processed = int(state["processed"])
        self._sum = float(state["sum"])
        self._queue = np.asarray(state["queue"], dtype=np.int64)
        self._qpos = np.asarray(state["qpos"], dtype=np.int64).copy()
        self._qend = np.asarray(state["qend"], dtype=np.int64)
        self.cs = BettingCS.from_state_dict(state["cs"])
        self.prior_weight = float(state.get("prior_weight", 1.0))
        pm = state.get("prior_mean")
        self.prior_mean = None if pm is None else np.asarray(pm, dtype=np.float64).reshape(self.K)
        scales = state.get("scales")
        if (scales is None) != (self.scales is None) or (
                scales is not None and not np.array_equal(np.asarray(scales, dtype=np.float64).reshape(-1), self.scales)):
            raise ValueError("the stratified state has other control scales")
        if self.scales is not None:
            self._scaled = np.zeros((self.N, 2 * self.scales.size))
            self._scaled[:self._drawn] = np.array(state["scaled"], dtype=np.float64).reshape(self._drawn, -1)


def uniform_observations(x: np.ndarray):
    """Seq's observations (y, a, b, v, known_lo, known_hi), each (B, N), for rows ``x`` (B, N), each the whole test set
    in a uniformly random order: what :class:`StratifiedBetting` with one group computes draw by draw, from
    cumulative sums."""
    x = np.asarray(x, dtype=np.float64)
    N = x.shape[-1]
    t = np.arange(1, N + 1, dtype=np.float64)
    zero = np.zeros(x.shape[:-1] + (1,))
    before = np.cumsum(np.concatenate([zero, x], axis=-1), axis=-1)[..., :-1]
    sq_before = np.cumsum(np.concatenate([zero, x * x], axis=-1), axis=-1)[..., :-1]
    pool = N - t + 1.0
    n = t - 1.0
    dev = np.maximum(sq_before - before * before / np.maximum(n, 1.0), 0.0)
    var = (_PRIOR_VAR + dev) / (n + 1.0)
    y = (before + pool * x) / N
    a = before / N
    b = (before + pool) / N
    v = (pool / N) ** 2 * var
    after = np.cumsum(x, axis=-1)
    return y, a, b, v, after / N - KNOWN_TOL, (after + N - t) / N + KNOWN_TOL


def seq_paths(x, *, delta: float, grid_size: int = GRID_SIZE, bet_level: float | None = None,
              chunk: int = 32) -> np.ndarray:
    """Seq's bounds after every label for a batch of uniformly random orders ``x`` (B, N).

    Each row is one run of :class:`~certsel.policies.cer_eval.Seq` (``radius="betting"``) on the items the row lists, in
    draw order. Returns (B, N, 4): one-sided lower and upper bounds at level delta, then the two-sided interval.
    """
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    B, N = x.shape
    y, a, b, v, klo, khi = uniform_observations(x)
    cs = BettingCS(B, delta=delta, grid_size=grid_size, bet_level=bet_level)
    out = np.empty((B, N, 4))
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        out[:, s:e] = cs.update(y[:, s:e], a[:, s:e], b[:, s:e], v[:, s:e], known_lo=klo[:, s:e],
                                known_hi=khi[:, s:e], path=True)
    return out
