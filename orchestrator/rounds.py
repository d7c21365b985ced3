"""Selection rounds: advance the scheduled candidates, settle them, decide.

Each round asks the hosts of the candidates the procedure schedules to advance them by
``budget.batch`` human labels, folds the snapshots into the records and lets the
:class:`~certsel.orchestrator.scheduling.Scheduler` settle statuses. At the end the
procedure is applied to the final evidence and the selection is made by objective.
"""

from __future__ import annotations

import time

import numpy as np

from certsel.config import RunConfig
from certsel.policies import select

from .records import Status
from .result import JobResult, dump_records, load_records, totals
from .scheduling import Scheduler
from .state import read_checkpoint, write_checkpoint


def objective_key(cfg: RunConfig, data) -> np.ndarray | None:
    """The objective as "smaller is better" (None without one)."""
    obj = data.objective
    if obj is None:
        return None
    return -obj if cfg.objective is not None and cfg.objective.goal == "maximize" else obj


def final_certified(plan, records) -> np.ndarray:
    """The procedure applied to the final evidence (for e-values: the running maxima)."""
    if plan.testing:
        return plan.procedure.certified(np.array([r.max_log_e for r in records]), plan.cfg.delta)
    return plan.procedure.certified_by_decisions(np.array([r.status is Status.CERTIFIED for r in records]))


def reconcile(plan, records, certified_mask) -> None:
    """Statuses that agree with the final set. A candidate that ended at a stricter level
    than the one the procedure finally reached (Holm: its budget ran out before others were
    certified) is in the final set: it is certified, at that level. One that passed its own
    test but is not in the set (FST after an earlier failure) says so."""
    thresholds = None
    if plan.testing:
        thresholds = -np.log(plan.procedure.decision_deltas(plan.cfg.delta, np.array([r.max_log_e for r in records])))
    for r, ok in zip(records, certified_mask, strict=True):
        if ok and r.status is not Status.CERTIFIED:
            r.status, r.reason = Status.CERTIFIED, "in the final set at the level the procedure reached"
            r.certified_at = r.first_crossing(float(thresholds[r.index])) if thresholds is not None else r.t
        elif r.status is Status.CERTIFIED and not ok:  # e.g. after an earlier failure in a fixed sequence
            r.end(Status.STOPPED, "passed its own test but is not in the procedure's certified set")


def final_bounds(plan, pool, records, certified_mask) -> None:
    """Each candidate's own one-sided bound at the level of its decision and the bounds that
    hold together for all candidates (:meth:`Procedure.simultaneous_bounds`): a testing
    candidate's host computes its bounds at both levels; an estimation candidate's own bound
    (at its policy's level) is already in its record. Without intervals (``tracking.intervals:
    none``) only the procedure's family-wise statement remains: alpha for the certified."""
    cfg, proc = plan.cfg, plan.procedure
    K = len(records)
    joint_levels = proc.joint_levels(cfg.delta, certified_mask)
    own = np.full(K, np.nan)
    if plan.testing and cfg.tracking.intervals != "none":
        levels = proc.decision_deltas(cfg.delta, np.array([r.max_log_e for r in records]))
        ran = [r for r in records if r.t > 0]
        asked = {r.name: [float(levels[r.index])] + ([] if np.isnan(joint_levels[r.index])
                                                     else [float(joint_levels[r.index])]) for r in ran}
        finals = pool.finalize([r.name for r in ran], asked)
        for r in records:
            if r.t == 0:  # never labelled: the trivial bound
                own[r.index] = 1.0
                continue
            snap = finals[r.name]
            r.ci, r.judge, r.label_minimum = tuple(snap.ci), snap.judge, snap.label_minimum
            r.upper_bound = snap.level_bounds[float(levels[r.index])]
            if not np.isnan(joint_levels[r.index]):
                own[r.index] = snap.level_bounds[float(joint_levels[r.index])]
    elif not plan.testing:
        deltas = proc.candidate_deltas(cfg.delta, K)
        for r in records:  # a policy's bound is at its own level only
            if joint_levels[r.index] == deltas[r.index]:
                own[r.index] = 1.0 if r.upper_bound is None else r.upper_bound
    joint = proc.simultaneous_bounds(cfg.delta, cfg.alpha, certified_mask, own)
    for r in records:
        r.joint_bound = None if np.isnan(joint[r.index]) else float(joint[r.index])


def round_sizes(active, log_thresholds, batch: int, smallest: int) -> dict:
    """The next round's labels per candidate: about what its evidence so far says it still
    needs to reach its threshold, (threshold - log E) / g with a 25% margin, g the growth of
    log E per label over the later half of its path (:func:`recent_growth`), between
    ``smallest`` and ``batch``; ``batch`` before any growth. The rounds may depend on the
    evidence: a candidate's certificate holds at any stopping time (scheduling.py)."""
    out = {}
    for r in active:
        growth = recent_growth(r.path)
        if growth <= 0:
            out[r.name] = batch
            continue
        need = (float(log_thresholds[r.index]) - r.log_e) / growth
        out[r.name] = int(np.clip(np.ceil(1.25 * need), min(smallest, batch), batch))
    return out


def recent_growth(path) -> float:
    """log E gained per label over the later half of the path: a mixture's evidence grows
    faster once its weights have concentrated, so the early labels under-state the rate."""
    t = len(path)
    if t == 0:
        return 0.0
    half = t // 2
    return (path[-1] - (path[half - 1] if half else 0.0)) / (t - half)


def run_selection(plan, pool, records, *, progress=None, tracker=None, job_dir=None, t0=None) -> JobResult:
    """The rounds of a selection job (FST, Bonferroni, Holm, or any registered procedure)."""
    cfg, data = plan.cfg, plan.data
    t0 = time.perf_counter() if t0 is None else t0
    names = data.names
    key = objective_key(cfg, data)
    sched = Scheduler(records, procedure=plan.procedure, delta=cfg.delta, testing=plan.testing,
                      mode=cfg.scheduling.mode, lookahead=cfg.scheduling.lookahead,
                      prune_keys=key if cfg.scheduling.prune else None, futility=cfg.scheduling.futility)
    cost_per_label = (1 + plan.r) * (2 if plan.uses_judge else 1) if plan.testing else 1
    every = cfg.state.snapshot_every
    rounds, resume = 0, None
    ckpt = None if job_dir is None else read_checkpoint(job_dir, "select", names)
    if ckpt is not None:  # a resumed job: the driver's records as they were, the candidates from snapshot + log
        load_records(records, ckpt["records"])
        rounds = int(ckpt["round"])
        resume = {"from_round": rounds, **pool.restore_all()}
        if tracker is not None:
            tracker.on_round(records)
    while True:
        active = sched.active()
        if not active:
            break
        batch = cfg.budget.batch
        if cfg.budget.max_requests is not None:
            left = cfg.budget.max_requests - totals(records)["requests"]
            batch = min(batch, left // (cost_per_label * len(active)))
            if batch < 1:
                sched.stop_all("request budget spent")
                break
        sizes = round_sizes(active, sched.log_thresholds(), batch, cfg.budget.smallest_round) \
            if plan.testing and cfg.scheduling.rounds == "predicted" else {r.name: batch for r in active}
        by_name = pool.step(sizes)
        for r in active:
            if r.name not in by_name:
                continue  # its host was lost too often: already marked
            r.apply(by_name[r.name])
            r.rounds.append(r.round_row())
        rounds += 1
        sched.settle()
        if tracker is not None:
            tracker.on_round(active)
        if job_dir is not None and rounds % every == 0:
            write_checkpoint(job_dir, {"kind": "select", "names": list(names), "round": rounds,
                                       "records": dump_records(records)})
        if progress is not None:
            progress(records, rounds)

    certified_mask = final_certified(plan, records)
    final_bounds(plan, pool, records, certified_mask)
    reconcile(plan, records, certified_mask)
    if key is not None:
        sel = int(select(certified_mask, key))
    else:  # a fixed sequence without an objective: the end of the certified prefix
        sel = int(np.flatnonzero(certified_mask)[-1]) if certified_mask.any() else -1
    K = len(records)
    return JobResult(cfg, data, records, [records[k].name for k in np.flatnonzero(certified_mask)],
                     names[sel] if sel >= 0 else None, plan.procedure.level(cfg.delta, K), totals(records),
                     plan.full_budget(), rounds, time.perf_counter() - t0, resume=resume)
