"""``certsel audit`` for the judge-stratified test: repetitions of the policy itself.

Each repetition runs :class:`~certsel.policies.judge_stratified.StratifiedTest` (the object the driver's actors run)
for every candidate to its whole budget, with the job's batches, per-candidate levels and a fresh seed, and returns
what the vectorised betting path returns (:func:`~.job.betting_repetitions`); the estimate is the mean of the
stratified observations, as the driver reports.
"""

from __future__ import annotations

import numpy as np

from certsel.policies.judge_stratified import StratifiedTest

from .base import BUDGET_GRID, repeat


def stratified_once(job) -> tuple:
    """One repetition for every candidate (module level: it runs in worker processes)."""
    cfg, table, truth, seed = job
    K, I = table.human.shape
    n = min(cfg.budget.n, I)
    levels = cfg.proc.candidate_deltas(cfg.delta, K)
    t_grid = grid(n)
    max_log_e, first = np.zeros(K), np.zeros(K, dtype=np.int64)
    missed = np.zeros(K, dtype=bool)
    est, classical = np.zeros((K, t_grid.size)), np.zeros((K, t_grid.size))
    for k in range(K):
        test = StratifiedTest(table.judge[k], alpha=cfg.alpha, delta=cfg.delta, horizon=n,
                              betting=cfg.policy.strategy, seed=seed + k, ci_delta=float(levels[k]))
        first[k], missed[k] = run_to_budget(test, table.human[k], max(1, cfg.budget.batch), -np.log(levels[k]),
                                            truth=float(truth[k]))
        max_log_e[k] = test.max_log_evalue
        _, h = test.labelled()
        est[k] = np.cumsum(test.observations)[t_grid - 1] / t_grid
        classical[k] = np.cumsum(h)[t_grid - 1] / t_grid
    return max_log_e, first, missed, est, classical


def run_to_budget(test: StratifiedTest, losses: np.ndarray, batch: int, threshold: float, *, truth=None,
                  stop_at_crossing: bool = False) -> tuple[int, bool]:
    """Feed ``test`` the ``losses`` it asks for, ``batch`` at a time, up to its horizon (or, with
    ``stop_at_crossing``, its first crossing of the log e-value ``threshold``). Returns (labels at the first
    crossing, else labels used; whether the two-sided interval ever missed ``truth``)."""
    first, missed = 0, False
    while test.drawn < test.horizon and not (stop_at_crossing and first):
        items = test.next_items(batch)
        path = test.update(items, losses[items])
        hit = np.flatnonzero(path >= threshold)
        if hit.size and not first:
            first = test.n - path.size + int(hit[0]) + 1
        if truth is not None:
            lo, hi = test.interval()
            missed |= not (lo - 1e-12 <= truth <= hi + 1e-12)
    return first or test.n, missed


def grid(n: int) -> np.ndarray:
    return np.unique(np.linspace(1, n, BUDGET_GRID).round().astype(int))


def stratified_repetitions(cfg, table, truth, reps: int, rng, progress, workers: int, seeds=None):
    """``reps`` repetitions: (max log E, first crossing, missed, estimates, classical, grid);
    repetition i runs as a job with seed ``seeds[i]`` (drawn from ``rng`` when not given)."""
    seeds = [int(x) for x in (rng.integers(2**31, size=reps) if seeds is None else seeds)]
    got = repeat(stratified_once, [(cfg, table, truth, s) for s in seeds], workers, progress)
    out = tuple(np.stack([g[i] for g in got]) for i in range(5))
    return (*out, grid(min(cfg.budget.n, table.human.shape[1])))
