"""Multi-task jobs (``tasks:``): a candidate is certified when it is certified on every task.

Each task is a job of its own (:meth:`~certsel.config.RunConfig.task_configs`), run by the same engine and
procedure, so every (candidate, task) has an e-process E_{k,t}, valid at any stopping time, for H_{k,t} ("candidate k
misses task t's target"). The job's null is the union H_k = OR_t H_{k,t}, with evidence

    E_k = min_t sup_s E_{k,t,s}:

if H_{k,t*} is true, E_k <= sup_s E_{k,t*,s}, so P(E_k >= 1/level) <= level whatever the other tasks did (an
intersection-union test: no correction across tasks, since one true null already holds the candidate back). The
procedure (FST, Bonferroni, Holm) then runs on the E_k as on one task's e-values. A task's procedure may stop a
candidate early; a stopped e-process is still valid at its stop and one never run is 1, so the combination stays
valid and may only certify less.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

import numpy as np

from certsel.config import RunConfig
from certsel.policies import select
from certsel.policies.procedures import Procedure

from .records import JobResult


@dataclass(frozen=True)
class TaskOutcome:
    """One task's job: its configuration, result and MLflow run."""

    name: str
    cfg: RunConfig
    result: JobResult
    run_id: str | None


@dataclass
class MultiTaskResult:
    """A multi-task job: every task's outcome and the certificate they make together."""

    cfg: RunConfig
    tasks: list[TaskOutcome]
    names: list[str]  # the candidates, in the job's order
    objective: np.ndarray | None  # per candidate: the mean over tasks of its objective column
    log_e: np.ndarray  # (tasks, K): each task's running-maximum log e-value
    combined: np.ndarray  # (K,): min over tasks
    certified: list[str]
    selected: str | None
    levels: np.ndarray  # (K,): the level each candidate's combined decision was taken at
    run_id: str | None = None
    tracking: dict | None = None
    output_dir: pathlib.Path | None = None
    files: list[pathlib.Path] = field(default_factory=list)
    # the combined certificate, built once (outputs.tasks.tasks_certificate): every output shows the same one
    certificate: object = field(default=None, repr=False)


def intersection_union(log_e: np.ndarray, procedure: Procedure, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """(combined log e-values (K,), certified mask (K,)): min over tasks (axis 0), then the
    procedure at ``delta`` (module docstring)."""
    log_e = np.asarray(log_e, dtype=np.float64)
    if log_e.ndim != 2 or log_e.shape[0] < 1:
        raise ValueError(f"log e-values must be (tasks, candidates), got shape {log_e.shape}")
    combined = log_e.min(axis=0)
    return combined, procedure.certified(combined, delta)


def combine(cfg: RunConfig, outcomes: list[TaskOutcome]) -> MultiTaskResult:
    """The job's certificate from its tasks' results (:func:`intersection_union`)."""
    names = outcomes[0].result.data.names
    log_e = np.array([[by[n].max_log_e for n in names] for by in ({r.name: r for r in o.result.records}
                                                                  for o in outcomes)])
    combined, mask = intersection_union(log_e, cfg.proc, cfg.delta)
    objective = None
    if all(o.result.data.objective is not None for o in outcomes):  # e.g. model size: the same on every task
        objective = np.mean([[dict(zip(o.result.data.names, o.result.data.objective, strict=True))[n] for n in names]
                             for o in outcomes], axis=0)
    selected = None
    if objective is not None:
        key = -objective if cfg.objective is not None and cfg.objective.goal == "maximize" else objective
        k = int(select(mask, key))
        selected = None if k < 0 else names[k]
    elif cfg.proc.needs_order and mask.any():  # a fixed sequence: its last certified
        selected = names[int(np.flatnonzero(mask)[-1])]
    levels = cfg.proc.decision_deltas(cfg.delta, combined)
    return MultiTaskResult(cfg, outcomes, list(names), objective, log_e, combined,
                           [n for n, m in zip(names, mask, strict=True) if m], selected, levels)


def total_labels(res: MultiTaskResult) -> dict:
    """Labels bought over all tasks, and at full budget."""
    spent = {k: sum(o.result.spent[k] for o in res.tasks) for k in ("human", "judge", "requests")}
    full = {k: sum(o.result.full[k] for o in res.tasks) for k in ("human", "judge", "requests")}
    return {"spent": spent, "full_budget": full}
