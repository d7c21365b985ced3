"""A recovery job's certificate in its own terms: "recovery >= r of <reference>".

A recovery job runs as the risk job it compiles to (:class:`~certsel.policies.recovery.Recovery`: losses
(r s_ref - s + 1) / (1 + r) at alpha = 1 / (1 + r)), so its decisions, e-values and family-wise guarantee are the risk
job's. This module restates them as recoveries once the job ends (``JobResult.recovery``), from the labels in the label
log:

* **estimate**: the ratio of the mean scores over the candidate's human-labelled items;
* **lower_bound** at the candidate's decision level: for R-Eval on a table,
  :func:`~certsel.policies.recovery.recovery_decision_bound` (the inversion over r' of the test's own bets, seeded with
  its recorded decision: >= r exactly when it passed). A judge-assisted test's same-bets family is not monotone in r',
  and a live job's log holds losses, not the two scores; for them the bound the risk bound U implies,
  :func:`from_risk_bound` (looser, also >= r exactly when it passed);
* **simultaneous_lower_bound**: for R-Eval on a table, the procedure's joint statement
  (:meth:`~certsel.policies.procedures.Procedure.simultaneous_bounds`) applied to -recovery, an upper bound at target
  -r; otherwise the joint risk bounds carried over the same way. Either way the certified set is exactly the candidates
  with a joint bound >= r.
"""

from __future__ import annotations

import numpy as np

from certsel.policies.recovery import recovery_decision_bound

from certsel.orchestrator.results.records import JobResult, RecoveryRow



def human_items(result: JobResult, name: str, t: int) -> np.ndarray:
    """The first ``t`` items a candidate's policy used, in purchase order, from the label log (a continued claim's:
    its test's order, the items consumed before this job first)."""
    claim = next((r.claim for r in result.records if r.name == name), None)
    if claim is not None:
        return np.asarray(claim.items)[:t]
    log = (result.labels or {}).get(name)
    if log is None:
        raise ValueError(f"{name}: a recovery statement needs the job's label log (collect_labels)")
    try:
        return log.human_items(t)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def from_risk_bound(upper: float | None, at_least: float) -> float | None:
    """The recovery bound implied by an upper bound U on the mean recovery loss: from r E[s_ref] - E[s] + 1 <= (1 + r)
    U, Rec >= r + (1 - (1 + r) U) / E[s_ref] >= r + 1 - (1 + r) U when U <= 1/(1 + r) (then 1 - (1 + r) U >= 0 and
    E[s_ref] <= 1); no statement otherwise. It is >= r exactly when U <= alpha, and holds wherever U holds (jointly for
    joint bounds)."""
    if upper is None or upper > 1.0 / (1.0 + at_least):
        return None
    return at_least + 1.0 - (1.0 + at_least) * float(upper)


def recovery_rows(result: JobResult) -> list[RecoveryRow] | None:
    """Every candidate's :class:`RecoveryRow` (None for a job that is not a recovery job)."""
    cfg, rec = result.cfg, result.data.recovery
    if cfg.recovery is None:
        return None
    # the inversion recomputes the test from the raw scores: not for a stacked aggregate whose losses were scaled
    if rec is not None and not (cfg.policy.uses_judge or cfg.policy.judge_first) and result.data.unit == 1.0:
        return _inverted_rows(result)
    return _implied_rows(result)


def _scores(result: JobResult, x) -> tuple[np.ndarray, np.ndarray]:
    """A candidate's labelled scores and reference scores, in purchase order (tables only)."""
    rec = result.data.recovery
    if rec is None or x.t == 0:
        return np.zeros(0), np.zeros(0)
    items = human_items(result, x.name, x.t)
    return rec.score[x.index, items], rec.reference[x.index, items]


def _estimate(result: JobResult, x) -> float | None:
    """The ratio of the labelled items' mean scores (weighted by task for a stacked aggregate)."""
    rec = result.data.recovery
    if rec is None or x.t == 0:
        return None
    items = human_items(result, x.name, x.t)
    est = float(rec.ratio(rec.score[x.index, items], rec.reference[x.index, items], items))
    return None if np.isnan(est) else est


def _on_table(result: JobResult, k: int) -> float | None:
    rec = result.data.recovery
    return None if rec is None else float(rec.on_table[k])


def _implied_rows(result: JobResult) -> list[RecoveryRow]:
    """Judge-assisted tests and live jobs: the recovery bounds implied by the risk bounds the job already states
    (:func:`from_risk_bound`); without bounds (``tracking.intervals: none``) the decision itself, r for the certified.
    """
    r0 = result.cfg.recovery.at_least
    certified = set(result.certified)
    rows = []
    for x in result.records:
        own = from_risk_bound(x.upper_bound, r0) if x.t > 0 else None
        joint = from_risk_bound(x.joint_bound, r0)
        if x.joint_bound is None and x.name in certified:
            joint = r0
        rows.append(RecoveryRow(estimate=_estimate(result, x), lower_bound=own, simultaneous_lower_bound=joint,
                                on_full_table=_on_table(result, x.index), labels=int(x.t)))
    return rows


def _inverted_rows(result: JobResult) -> list[RecoveryRow]:
    """R-Eval on a table: each bound inverts the test itself over r'
    (:func:`~certsel.policies.recovery.recovery_decision_bound`), and the joint bounds apply the procedure's rules to
    -recovery, an upper bound at target -r."""
    cfg = result.cfg
    proc, r0, K = cfg.proc, cfg.recovery.at_least, len(result.records)
    max_log_e = np.array([x.max_log_e for x in result.records])
    certified = np.array([x.name in set(result.certified) for x in result.records])
    decision = proc.decision_deltas(cfg.delta, max_log_e)
    joint_levels = proc.joint_levels(cfg.delta, certified)
    rows, joint_own = [], np.full(K, np.nan)
    for x in result.records:
        k = x.index
        s, ref = _scores(result, x)

        # the test's own bets: a continued claim's are its recorded test's (its horizon and delta)
        test = {"delta": cfg.delta, "betting": cfg.policy.strategy, "horizon": cfg.budget.n,
                "observation": cfg.policy.observation} if x.claim is None else x.claim.test

        def bound(level):
            if x.t == 0:
                return 0.0  # never labelled: the trivial bound
            return float(recovery_decision_bound(s, ref, at_least=r0, level=level, delta=test["delta"],
                                                 betting=test["betting"], horizon=test["horizon"],
                                                 max_log_evalue=x.max_log_e, observation=test["observation"],
                                                 past_horizon=x.claim is not None))

        lower = bound(float(decision[k]))
        if not np.isnan(joint_levels[k]):
            joint_own[k] = lower if joint_levels[k] == decision[k] else bound(float(joint_levels[k]))
        rows.append(dict(estimate=_estimate(result, x), lower_bound=lower if lower > 0 else None,  # 0: no statement
                         on_full_table=_on_table(result, k), labels=int(x.t)))
    joint = -proc.simultaneous_bounds(cfg.delta, -r0, certified, -joint_own)
    return [RecoveryRow(simultaneous_lower_bound=None if np.isnan(j) or j <= 0 else float(j), **row)
            for row, j in zip(rows, joint, strict=True)]
