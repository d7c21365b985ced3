"""A multi-task job's data: every task's table, checked together, and for ``aggregate:`` one stacked table whose mean is
the weighted aggregate's (docs/recovery_and_tasks.md, 'A weighted aggregate').

**The stacked table.** Tasks t = 1..T with N_t items, risks R_t and weights w_t summing to 1. Put every task's items in
one table of N = sum_t N_t rows and scale task t's losses by f_t = c_t / M, with c_t = w_t N / N_t and M = max_t c_t
(every f_t in (0, 1]). The stacked table's mean loss is

    (1/N) sum_t N_t f_t R_t = (1/M) sum_t w_t R_t,

so testing it at alpha / M is testing sum_t w_t R_t <= alpha with the same machinery: one random order over the stacked
items (without replacement, as for one table), the same policies, e-values and procedures. The policies' risk numbers
are in stacked units; M times them is the aggregate's (:attr:`~certsel.orchestrator.inputs.jobdata.JobData.unit`).
``weights: size`` gives every c_t = 1 (M = 1, the micro average); equal weights on tasks of unequal sizes give M > 1
(the small tasks' items weigh more, and the test needs more labels than one table of N items).

A recovery aggregate stacks the recovery losses (r s_ref - s + 1) / (1 + r) the same way: sum_t w_t E[loss_t] <=
1 / (1 + r) exactly when sum_t w_t E[s_t] >= r sum_t w_t E[s_ref,t].
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from certsel.config import RunConfig
from certsel.errors import InputError
from certsel.workers.replay import LossTable

from .jobdata import JobData, RecoveryScores, _positions, _subset, check_size, load_replay


@dataclass(frozen=True)
class TaskPart:
    """One task's share of a stacked table."""

    name: str
    weight: float  # w_t, normalised
    items: int  # N_t
    start: int  # its first row in the stacked table
    factor: float  # f_t: its losses' scale in the stacked table
    path: str  # its table


@dataclass(frozen=True)
class Aggregate:
    """How a stacked table was made (module docstring); ``unit`` is M."""

    weights: str  # "equal", "size" or "given"
    parts: tuple[TaskPart, ...]
    unit: float
    true_risks: np.ndarray | None  # (tasks, K): each candidate's risk on each task's whole table

    def task_of(self, rows: np.ndarray) -> np.ndarray:
        """The task index of stacked rows."""
        starts = np.array([p.start for p in self.parts])
        return np.searchsorted(starts, np.asarray(rows), side="right") - 1

    def words(self) -> str:
        """The weights in words: "sentiment 0.5, sum 0.5"."""
        return ", ".join(f"{p.name} {p.weight:.4g}" for p in self.parts)


def load_tasks(cfg: RunConfig, *, sized: bool = True) -> tuple[list[RunConfig], list[JobData]]:
    """Every task's job and data, all checked before anything runs: the same candidates on every task and, for a fixed
    sequence, in the same order. ``sized=False`` skips each task's own budget check (an aggregate's budget is for the
    stacked table)."""
    if not cfg.policy.is_testing:
        raise InputError(f"tasks: a multi-task job combines e-values; policy {cfg.policy.kind!r} has none "
                         "(use r-eval, r-autoeval, r-autoeval+ or judge-stratified)")
    cfgs = cfg.task_configs()
    datas = []
    for tc, t in zip(cfgs, cfg.tasks, strict=True):
        load_cfg = tc if sized else tc.model_copy(update={"budget": tc.budget.model_copy(update={"n": 1, "r": 0})})
        try:
            datas.append(load_replay(load_cfg))  # a task is a table (tasks[].data)
        except (ValueError, InputError) as exc:
            raise InputError(f"task {t.name!r}: {exc}") from None
    first, names = cfg.tasks[0].name, datas[0].names
    for t, d in zip(cfg.tasks[1:], datas[1:], strict=True):
        if set(d.names) != set(names):
            missing, extra = sorted(set(names) - set(d.names)), sorted(set(d.names) - set(names))
            raise InputError(f"task {t.name!r} does not have the candidates of task {first!r} (missing: "
                             f"{', '.join(missing[:5]) or 'none'}; extra: {', '.join(extra[:5]) or 'none'}); "
                             "list the shared ones in candidates:")
        if d.names != names and cfg.proc.needs_order:
            raise InputError(f"task {t.name!r} orders the candidates differently from task {first!r} (data.order); "
                             "a fixed sequence needs one order: give order: [...]")
    return cfgs, datas


def load_aggregate(cfg: RunConfig) -> JobData:
    """The stacked table of an ``aggregate:`` job (module docstring), checked against the job's budget."""
    cfgs, datas = load_tasks(cfg, sized=False)
    data = stack_tasks(cfg, datas)
    try:
        check_size(cfg, data.n_items, "the stacked tasks")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return data


def stack_tasks(cfg: RunConfig, datas: list[JobData]) -> JobData:
    """One table from the tasks' tables, in the first task's candidate order, each task's losses (and judge losses)
    scaled by its f_t."""
    names = datas[0].names
    sizes = [d.n_items for d in datas]
    weights = cfg.task_weights(sizes)
    N = sum(sizes)
    c = np.array([w * N / n for w, n in zip(weights, sizes, strict=True)])
    unit = float(c.max())
    factors = c / unit
    tables = [_reordered(d.table, names) for d in datas]
    judged = all(t.judge is not None for t in tables)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    parts = tuple(TaskPart(t.name, float(w), int(n), int(s), float(f), str(t.data.path))
                  for t, w, n, s, f in zip(cfg.tasks, weights, sizes, starts, factors, strict=True))
    table = LossTable(
        candidates=tables[0].candidates,
        items=np.concatenate([np.char.add(f"{p.name}/", t.items.astype(str)) for p, t in zip(parts, tables, strict=True)]),
        human=np.concatenate([t.human * f for t, f in zip(tables, factors, strict=True)], axis=1),
        judge=np.concatenate([t.judge * f for t, f in zip(tables, factors, strict=True)], axis=1) if judged else None,
        order=tables[0].order,
        objective=None if any(t.objective is None for t in tables)
        else np.mean([t.objective for t in tables], axis=0),  # e.g. model size: the same on every task
        judge_column=tables[0].judge_column if judged else None,
    )
    features = None
    if all(d.features is not None for d in datas):
        dims = {d.features.shape[1] for d in datas}
        if len(dims) > 1:
            raise InputError(f"aggregate: the tasks' item embeddings have different sizes ({sorted(dims)}); "
                             "a stacked table needs one")
        features = np.concatenate([d.features for d in datas])
    recovery = None
    if all(d.recovery is not None for d in datas):
        recs = [_reordered_recovery(d, names) for d in datas]
        recovery = dataclasses.replace(
            recs[0], score=np.concatenate([r.score for r in recs], axis=1),
            reference=np.concatenate([r.reference for r in recs], axis=1),
            weight=np.concatenate([np.full(n, ci) for n, ci in zip(sizes, c, strict=True)]))
    h = hashlib.sha256()
    for p, d in zip(parts, datas, strict=True):
        h.update(f"{p.name}:{p.weight!r}:{d.fingerprint};".encode())
    agg = Aggregate(weights=cfg.aggregate.weights if isinstance(cfg.aggregate.weights, str) else "given",
                    parts=parts, unit=unit,
                    true_risks=np.stack([t.human.mean(axis=1) for t in tables]))
    return JobData(table=table, features=features, fingerprint=h.hexdigest()[:16], recovery=recovery,
                   unit=unit, aggregate=agg)


def _reordered(table: LossTable, names: list[str]) -> LossTable:
    """``table`` with its candidates in the order ``names``."""
    return _subset(table, _positions(table, names, "tasks"))


def _reordered_recovery(data: JobData, names: list[str]) -> RecoveryScores:
    pos = {n: k for k, n in enumerate(data.names)}
    return data.recovery.take(np.array([pos[n] for n in names]))
