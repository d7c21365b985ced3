"""Statistics of a finished job's evidence that its outputs print: computed here, once, when
the job ends, and kept on the :class:`~certsel.orchestrator.results.records.JobResult`, so
that the certificate, the report and the plots only format them (no output recomputes one).

* ``levels``: each candidate's decision level (its e-value's threshold is 1 / level):
  the procedure's step-down levels at the final e-values for a testing policy, the
  per-candidate levels for an estimation one;
* ``ci_delta``: the level of the candidates' two-sided intervals;
* ``recovery``: a recovery job's figures (:mod:`.recovery`; needs the label log);
* ``budget_curve``: what the job would have selected with a smaller per-candidate budget,
  recomputed from the recorded evidence (each candidate's evidence up to b labels is a prefix
  of what it recorded).
"""

from __future__ import annotations

import numpy as np

from certsel.policies import select

from certsel.orchestrator.results.records import JobResult, Status

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
    return result


def budgets(cfg) -> list[int]:
    """The per-candidate budgets of the curve: every round's size up to the whole budget."""
    out = list(range(cfg.budget.batch, cfg.budget.n + 1, cfg.budget.batch))
    if out and out[-1] != cfg.budget.n:
        out.append(cfg.budget.n)
    return out


def budget_curve(result: JobResult) -> list[tuple[int, float | None]] | None:
    """(b, the objective of what the job would have selected with b human labels per
    candidate) for each of :func:`budgets`; None for a ranking or a job without an objective."""
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
        k = int(select(cert, key))
        out.append((b, None if k < 0 else float(objective[k])))
    return out
