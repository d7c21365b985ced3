"""A recovery job's certificate in its own terms: "recovery >= r of <reference>".

A recovery job runs as the risk job it compiles to (:class:`~certsel.policies.recovery.Recovery`:
the losses (r s_ref - s + 1) / (1 + r) at alpha = 1 / (1 + r)), so its decisions, e-values and
family-wise guarantee are the risk job's. This module restates them as recoveries, each number
from the labels the job bought (the label log, in purchase order):

* **estimate**: the ratio of the mean scores over the candidate's human-labelled items;
* **lower_bound** at the level of the candidate's decision: for R-Eval (human labels alone),
  :func:`~certsel.policies.recovery.recovery_decision_bound`, the inversion over r' of the
  test's own bets, seeded with its recorded decision, so it is >= r exactly when the candidate
  passed; a judge-assisted test's observations mix the judge's scores, whose same-bets family
  is not monotone in r', so its bound is its decision: r when it passed, none otherwise;
* **simultaneous_lower_bound**: the procedure's joint statement
  (:meth:`~certsel.policies.procedures.Procedure.simultaneous_bounds`) applied to -recovery,
  an upper bound at target -r: each candidate's own bound enters at the level the procedure
  gives it, and the certified set is exactly the candidates with a joint bound >= r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from certsel.policies.procedures import get_procedure
from certsel.policies.recovery import recovery_decision_bound

from certsel.orchestrator.run.records import JobResult

from .numbers import _round, round_down


@dataclass(frozen=True)
class RecoveryRow:
    """One candidate's recovery figures (None: no statement)."""

    estimate: float | None
    lower_bound: float | None
    simultaneous_lower_bound: float | None
    on_full_table: float | None
    labels: int

    def as_dict(self) -> dict:
        return {"estimate": _round(self.estimate), "lower_bound": round_down(self.lower_bound),
                "simultaneous_lower_bound": round_down(self.simultaneous_lower_bound),
                "on_full_table": _round(self.on_full_table), "labels": self.labels}


def human_items(result: JobResult, name: str, t: int) -> np.ndarray:
    """The first ``t`` items a candidate's policy used, in purchase order, from the label log."""
    log = (result.labels or {}).get(name)
    if log is None:
        raise ValueError(f"{name}: a recovery statement needs the job's label log (collect_labels)")
    roles = np.asarray(log["role"], dtype=object)
    items = np.asarray(log["item"], dtype=np.int64)[roles == "human"]
    if items.size < t:
        raise ValueError(f"{name}: the label log has {items.size} human labels, the policy used {t}")
    return items[:t]


def recovery_rows(result: JobResult) -> list[RecoveryRow] | None:
    """Every candidate's :class:`RecoveryRow` (None for a job that is not a recovery job)."""
    cfg, rec = result.cfg, result.data.recovery
    if rec is None:
        return None
    proc, r0, K = get_procedure(cfg.procedure), rec.claim.at_least, len(result.records)
    max_log_e = np.array([x.max_log_e for x in result.records])
    certified = np.array([x.name in set(result.certified) for x in result.records])
    decision = proc.decision_deltas(cfg.delta, max_log_e)
    joint_levels = proc.joint_levels(cfg.delta, certified)
    own_bound = not (cfg.policy.uses_judge or cfg.policy.judge_first)  # R-Eval: the bound that inverts the test
    table = rec.on_table
    rows, joint_own = [], np.full(K, np.nan)
    for x in result.records:
        k = x.index
        s = ref = np.zeros(0)
        if x.t > 0:
            items = human_items(result, x.name, x.t)
            s, ref = rec.score[k, items], rec.reference[k, items]

        def bound(level):
            if x.t == 0:
                return 0.0  # never labelled: the trivial bound
            if not own_bound:
                return r0 if x.max_log_e >= -math.log(level) else 0.0
            return float(recovery_decision_bound(s, ref, at_least=r0, level=level, delta=cfg.delta,
                                                 betting=cfg.policy.strategy, horizon=cfg.budget.n,
                                                 max_log_evalue=x.max_log_e, observation=cfg.policy.observation))

        lower = bound(float(decision[k]))
        if not np.isnan(joint_levels[k]):
            joint_own[k] = lower if joint_levels[k] == decision[k] else bound(float(joint_levels[k]))
        est = float(s.sum() / ref.sum()) if ref.sum() > 0 else None
        rows.append(dict(estimate=est, lower_bound=lower if lower > 0 else None,  # 0: no statement
                         on_full_table=None if table is None else float(table[k]), labels=int(x.t)))
    # the joint statement on -recovery (an upper bound at -r), so the procedure's rules apply unchanged
    joint = -proc.simultaneous_bounds(cfg.delta, -r0, certified, -joint_own)
    return [RecoveryRow(simultaneous_lower_bound=None if np.isnan(j) or j <= 0 else float(j), **row)
            for row, j in zip(rows, joint, strict=True)]
