"""Policies and candidates built for tests: Cer-Eval constructed directly (the reference a
job is compared with, not through the policy-kind registry) and a candidate of a named kind
built the way a worker builds it."""

from __future__ import annotations

import numpy as np
from certsel.policies import CerEval, NearestNeighborPartition, ScorePartition
from certsel.policies.betting import get_strategy
from certsel.policies.kinds import PolicySettings, get_policy_kind
from certsel.workers.candidate import policy_candidate
from certsel.workers.contracts import JobArrays


def cer_eval_direct(n_items: int, *, delta: float, alpha: float, seed, features=None, judge_scores=None,
                    radius: str = "betting") -> CerEval:
    """Cer-Eval as a job builds it for a candidate: 1-NN groups on ``features`` seeded from
    ``seed``, or judge strata of ``judge_scores``."""
    if judge_scores is not None:
        part = ScorePartition(judge_scores)
    else:
        part = NearestNeighborPartition(features, random_state=int(np.random.default_rng(seed).integers(2**31)))
    return CerEval(n_items, part, delta=delta, threshold=alpha, radius=radius, seed=seed)


def candidate(name: str, source, kind: str, *, alpha: float, delta: float, betting="up", n: int,
              human_items=None, judge_items=None, r: int = 0, ci_delta=None, observation: str = "split",
              seed=(0, 0), futility=None):
    """The worker-side candidate of policy kind ``kind`` on ``source`` (the job's order in
    ``human_items`` / ``judge_items`` for the kinds that label it)."""
    settings = PolicySettings(alpha=alpha, delta=delta, budget=n, seed=seed, betting=get_strategy(betting), r=r,
                              observation=observation, ci_delta=delta if ci_delta is None else ci_delta,
                              futility=futility)
    return policy_candidate(name, source, get_policy_kind(kind), settings,
                            JobArrays(human_items=human_items, judge_items=judge_items))
