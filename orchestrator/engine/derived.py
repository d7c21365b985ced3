"""Statistics of a finished job's evidence that its outputs print, computed once when the job ends and kept on the
:class:`~certsel.orchestrator.results.records.JobResult` (the certificate, report and plots only format them).

* ``levels``: each candidate's decision level (threshold 1 / level): the procedure's step-down levels at the final
  e-values for a testing policy, the per-candidate levels for an estimation one;
* ``ci_delta``: the level of the candidates' two-sided intervals;
* ``recovery``: a recovery job's figures (:mod:`.recovery`; needs the label log);
* ``budget_curve``: what the job would have selected with a smaller per-candidate budget (each candidate's evidence up
  to b labels is a prefix of what it recorded);
* ``oracle``: the human labels used against an estimate of the fewest an oracle would need (:func:`oracle_estimate`).
"""

from __future__ import annotations

import numpy as np


from certsel.orchestrator.results.records import JobResult, OracleEstimate, Status

from certsel.policies.ranking_limit import labelled_moments, ranking_need
from .recovery import recovery_rows


def derive(result: JobResult) -> JobResult:
    """``result`` with its derived statistics filled in (see the module docstring)."""
    cfg, K = result.cfg, len(result.records)
    proc = cfg.proc
    max_log_e = np.array([r.max_log_e for r in result.records])
    levels = proc.decision_deltas(cfg.delta, max_log_e) if cfg.policy.is_testing else proc.candidate_deltas(cfg.delta, K)
    result.levels = [float(v) for v in levels]
    result.ci_delta = float(proc.candidate_deltas(cfg.delta, K).min())
    if cfg.recovery is not None and result.labels is not None:
        result.recovery = recovery_rows(result)
    result.budget_curve = budget_curve(result)
    result.oracle = oracle_estimate(result)
    return result


def oracle_estimate(result: JobResult) -> OracleEstimate | None:
    """The job's human labels against the fewest an oracle would need for what it certified.

    An oracle that knows every risk tests only the candidates it will certify (under a fixed sequence still each of
    them: the certified set is a prefix) and spends on each the fewest labels any level test can need on average,
    log(1/level) / KL_inf (with a judge, the prediction-powered floor): each certified candidate's ``label_minimum`` at
    its decision level (:mod:`certsel.policies.limits`). The sum is a plug-in estimate, not a bound; None for an
    estimation policy, a gate, a job that continued a claim tested before (its labels span runs), or a job that
    certified nothing.
    """
    cfg = result.cfg
    if cfg.proc.ranking:
        return _ranking_oracle(result)
    # a gate decides failures too, whose fewest labels are the mirrored test's: not estimated here
    if not cfg.policy.is_testing or cfg.proc.gates:
        return None
    if any(r.claim is not None for r in result.records):  # a continued claim's labels span runs: no one job's spend
        return None
    mins = [r.label_minimum for r in result.records if r.name in set(result.certified)]
    if not mins or any(m is None for m in mins):
        return None
    # a fixed sequence's first uncertified candidate: what any procedure needs to end it (session.stop_request)
    first = next((r for r in result.records if r.stop_minimum is not None), None)
    stop = 0.0 if first is None else float(first.stop_minimum)
    # what the job bought, a pilot's check included: the same count as the certificate's labels.spent
    return OracleEstimate(labels=int(result.spent["human"]), oracle=float(sum(mins)) + stop, candidates=len(mins),
                          stop=stop, stopped=None if first is None else first.name)


def _ranking_oracle(result: JobResult) -> OracleEstimate | None:
    """A full ranking (``pairwise.goal: ranking``): the model evaluations an oracle would need
    (:func:`~.oracle.ranking_need`, each pair at the job's level per direction, with the job's epsilon), its pair
    moments estimated from the job's own labels; None for the other goals or without the label log."""
    rk = result.ranking
    if rk is None or rk.goal != "ranking" or result.labels is None:
        return None
    rows = [result.labels.get(r.name) for r in result.records]
    if any(x is None for x in rows):
        return None
    labels = [(x.item[x.role == "human"], x.loss[x.role == "human"]) for x in rows]
    need = ranking_need(*labelled_moments(labels), result.data.n_items, rk.pair_delta_per_direction, rk.epsilon)
    return OracleEstimate(labels=int(sum(r.n_human for r in result.records)), oracle=float(need.sum()),
                          candidates=len(rows), basis="ranking")


def budgets(cfg) -> list[int]:
    """The per-candidate budgets of the curve: every round's size up to the whole budget."""
    out = list(range(cfg.budget.batch, cfg.budget.n + 1, cfg.budget.batch))
    if out and out[-1] != cfg.budget.n:
        out.append(cfg.budget.n)
    return out


def budget_curve(result: JobResult) -> list[tuple[int, float | None]] | None:
    """(b, the objective of what the job would have selected with b human labels per candidate) for each of
    :func:`budgets`; None for a ranking or a job without an objective."""
    cfg, objective = result.cfg, result.data.objective
    proc = cfg.proc
    if objective is None or proc.ranking:
        return None
    key = -objective if cfg.objective and cfg.objective.goal == "maximize" else objective
    out = []
    for b in budgets(cfg):
        if any(r.path for r in result.records):
            max_log_e = np.array([max([0.0] + r.path[:b]) for r in result.records])
            cert = proc.certified(max_log_e, cfg.delta)
        else:
            ok = np.array([r.status == Status.CERTIFIED and 0 < r.certified_at <= b for r in result.records])
            cert = proc.certified_by_decisions(ok)
        k = proc.selection(cert, key)
        out.append((b, None if k < 0 else float(objective[k])))
    return out
