"""Can a candidate be certified at all within its budget? Checked before a job runs.

The most a candidate can do is to have every loss at its minimum. If even then its test cannot reach its level within
``budget.n`` human labels, the job would spend the whole budget for nothing; :func:`feasibility_warning` says so in one
line, with the smallest budget that could. It is a warning, not an error: the job is still valid, only hopeless.
"""

from __future__ import annotations

import numpy as np

from certsel.config import RunConfig
from certsel.policies import Seq
from certsel.policies.kinds import Labels, PolicySettings

MAX_N = 1 << 16  # budgets searched for the smallest feasible one


def _testing_reaches(cfg: RunConfig, level: float, n: int, n_items: int | None = None) -> bool:
    """Whether the e-process reaches 1/level within n labels when every loss is 0 (the policy kind answers:
    :meth:`~certsel.policies.kinds.PolicyKind.reaches_at_zero`)."""
    # without replacement the test knows the items left (a table all drawn is its mean): it reaches sooner
    settings = PolicySettings(alpha=cfg.alpha, delta=cfg.delta, budget=n, betting=cfg.policy.strategy,
                              r=cfg.budget.r if cfg.policy.uses_judge else 0, observation=cfg.policy.observation,
                              sampling=cfg.policy.sampling_for(n_items))
    return cfg.policy.policy_kind.reaches_at_zero(settings, n_items, level)


def _estimation_reaches(cfg: RunConfig, level: float, n: int, n_items: int) -> bool:
    """Whether Seq with threshold alpha decides R <= alpha within n labels of zero losses."""
    n = min(n, n_items)
    p = Seq(n_items, delta=level, threshold=cfg.alpha, radius=cfg.policy.radius, seed=0)
    z = np.zeros(n_items)
    while p.n_labeled < n and not p.done:
        items = p.next_items(min(64, n - p.n_labeled))
        p.update(items, z[items])
    return p.decision == -1


def smallest_budget(reaches, n: int, cap: int) -> int | None:
    """The smallest m in (n, cap] with ``reaches(m)``, by doubling then bisection (None if none)."""
    lo, hi = n, None
    m = n
    while m < cap:
        m = min(cap, 2 * m)
        if reaches(m):
            hi = m
            break
        lo = m
    if hi is None:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


def feasibility_warning(cfg: RunConfig, n_candidates: int, n_items: int) -> str | None:
    """One line when no candidate could be certified within ``budget.n`` even with every loss at 0 (at the strictest
    level the procedure tests a candidate at); None otherwise."""
    proc = cfg.proc
    if proc.ranking:
        return None
    level = float(proc.candidate_deltas(cfg.delta, n_candidates).min())
    n = cfg.budget.n
    if cfg.policy.is_testing:
        def reaches(m):
            return _testing_reaches(cfg, level, m, n_items)

        cap = n_items if cfg.policy.policy_kind.labels is Labels.CHOSEN else MAX_N
        if cfg.policy.without_replacement:  # n human and r n judge-only draws from the table
            cap = n_items // max(cfg.budget.r if cfg.policy.uses_judge else 0, 1)
    else:
        def reaches(m):
            return _estimation_reaches(cfg, level, m, n_items)

        cap = n_items
    if reaches(min(n, cap)):
        return None
    need = smallest_budget(reaches, min(n, cap), cap)
    what = (f"budget.n = {need} could" if need is not None
            else f"no budget up to {cap} could" + (" (the test set's size)" if cap == n_items else ""))
    return (f"warning: with budget.n = {n} no candidate can reach its level {level:.3g} ({proc.level(cfg.delta, n_candidates)}) "
            f"even if every loss is 0; {what}")
