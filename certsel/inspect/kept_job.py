"""A selection or ranking decided inside inspect-ai, kept as a certsel job like any other.

When the last task of a :class:`~certsel.inspect.CertifiedSelection` or :class:`~certsel.inspect.CertifiedRanking` is
done, its evidence becomes the engine's :class:`~certsel.orchestrator.results.records.JobResult`, written by certsel's
outputs: a folder ``jobs/JOB_ID`` under certsel's home (``selection.json``, the report, ``scores.parquet`` with every
score the tests used) and an MLflow run. The claim is about the loss 1 - score: R <= 1 - T is "mean score >= T".
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from certsel.workers.replay import LossTable

SCORES = "scores.parquet"


JUDGE = "loss_judge"


def member_losses(m) -> list:
    """A member's (sample id, human loss or NaN, judge loss or None) in schedule order; judge-assisted, its complete
    blocks (one labelled sample, then ``ratio`` judge-only ones)."""
    run = m.run
    if run.judge is None:
        return [(i, loss, None) for i, loss in zip(run.tested_ids(), run.losses, strict=True)]
    h, jl, ju = run.judge.all()
    ids = run.ledger.order[: len(h) * (m.ratio + 1)]
    judge = np.column_stack([jl, ju.reshape(len(h), m.ratio)]).reshape(-1) if len(h) else np.zeros(0)
    human = np.full(judge.size, np.nan)
    human[:: m.ratio + 1] = h
    return [(i, 1.0 - float(a), 1.0 - float(b)) for i, a, b in zip(ids, human, judge)]


def scores_table(names: list, losses: dict, order: bool) -> pa.Table:
    """The losses the tests used: one row per candidate and scored sample, in test order (``position``)."""
    judged = any(j is not None for n in names for _, _, j in losses[n])
    rows = {"candidate": [], "item": [], "loss_human": [], "position": [], **({JUDGE: []} if judged else {})}
    if order:
        rows["rank"] = []
    for k, n in enumerate(names):
        for pos, (item, loss, judge) in enumerate(losses[n]):
            rows["candidate"].append(n)
            rows["item"].append(str(item))
            rows["loss_human"].append(float(loss))
            rows["position"].append(pos)
            if judged:
                rows[JUDGE].append(judge)
            if order:
                rows["rank"].append(k)
    return pa.table(rows)


def loss_table(names: list, items: list, losses: dict, objective: dict | None) -> LossTable:
    """The losses as the engine's dense table over the task's samples (NaN where unscored: no full-table risk is
    stated then)."""
    index = {str(i): k for k, i in enumerate(items)}
    judged = any(j is not None for n in names for _, _, j in losses[n])
    human = np.full((len(names), len(items)), np.nan)
    judge = np.full(human.shape, np.nan) if judged else None
    for k, n in enumerate(names):
        for item, loss, jl in losses[n]:
            human[k, index[str(item)]] = loss
            if judged:
                judge[k, index[str(item)]] = jl
    obj = None if objective is None else np.array([float(objective[n]) for n in names])
    return LossTable(np.array(names), np.array([str(i) for i in items]), human, judge, np.arange(len(names)), obj,
                     JUDGE if judged else None)


def table_fingerprint(table: pa.Table) -> str:
    """The scores the tests used, hashed (the job's data fingerprint)."""
    h = hashlib.sha256()
    for col in table.columns:
        h.update(np.asarray(col.to_numpy(zero_copy_only=False)).astype(str).tobytes())
    return h.hexdigest()[:16]


def write(build, table: pa.Table, settings: dict, *, home=None, track: bool = True):
    """Keep what inspect decided as a certsel job, through the job lifecycle every front end uses: its folder under
    ``home`` (default: certsel's jobs folder) with ``table``, report and certificate, and an MLflow run (``track``).
    ``build(path, fingerprint)`` makes the JobResult. The scores and ``settings`` identify the job. Returns the result
    with ``job_id``, ``output_dir``, ``files`` and ``tracking`` set."""
    from certsel.home import jobs_dir
    from certsel.orchestrator.commands.lifecycle import JobLifecycle
    from certsel.orchestrator.outputs.tracking import JobTracker

    started = time.time()
    root = pathlib.Path(home) if home is not None else jobs_dir()
    data_fp = table_fingerprint(table)
    job_fp = hashlib.sha256(json.dumps({**settings, "scores": data_fp}, sort_keys=True, default=str).encode())
    with JobLifecycle.open(root, job_fp.hexdigest()[:16], name=settings.get("name", "inspect"), auto=False,
                           front_end="inspect", started=started) as life:
        pq.write_table(table, life.dir / SCORES)
        result = build(life.dir / SCORES, data_fp)
        life.job.update(name=result.cfg.name)
        if track:
            life.track(JobTracker(result.cfg.tracking.uri, result.cfg.tracking.experiment), result.cfg, result.data,
                       result.records)
        return life.finish(result, files=[life.dir / SCORES])


def selection_result(sel, end, items: list, losses: dict, path, data_fp: str):
    """A :class:`~certsel.inspect.CertifiedSelection`'s session as the engine's result: its records and its end (R-Eval
    or R-AutoEval+ on the loss 1 - score at alpha = 1 - T), with the job's configuration and data."""
    from certsel.api import job_config
    from certsel.orchestrator.engine.derived import derive
    from certsel.orchestrator.inputs.jobdata import JobData

    _, _, lower = sel.final_joint
    first = sel.members[sel.names[0]]
    judge = first.run.judge is not None
    objective = sel.objective_of(lower)
    raw = {"name": sel.name, "data": {"path": str(path), **({"order": "rank"} if sel.proc.needs_order else {}),
                                      **({"judge": JUDGE} if judge else {})},
           "policy": {"kind": "r-autoeval+" if judge else "r-eval", "betting": first.strategy.name,
                      "sampling": first.sampling},
           "alpha": sel.alpha, "delta": sel.delta, "procedure": sel.procedure,
           "budget": {"n": first.run.horizon, **({"r": first.ratio} if judge else {})},
           "scheduling": {"futility": sel.futility, "start": "top"},  # inspect runs no pilot
           "state": {"store": None if sel.store is None else str(sel.store)},  # the ledger its claims are kept in
           "tracking": {"experiment": sel.experiment, **({"uri": sel.mlflow} if sel.mlflow else {})}}
    if objective is not None:
        raw["objective"] = {"column": sel.objective_column, "goal": sel.objective_goal}
        for r in sel.session.records:  # the column the job states (the given objective, or the joint bound)
            r.objective = objective[r.name]
    data = JobData(table=loss_table(sel.names, items, losses, objective), features=None, fingerprint=data_fp)
    for r, m in zip(sel.session.records, (sel.members[n] for n in sel.names), strict=True):
        r.true_risk = float(np.mean(m.run.losses)) if len(m.run.losses) == m.run.size else None
    size = sum(sel.members[n].run.size for n in sel.names)
    res = sel.session.result(end, job_config(raw), data, rounds=max(r.t for r in sel.session.records),
                             full={"human": size, "judge": 0, "requests": size})
    return derive(res)


def write_selection(sel, end, *, home=None, track: bool = True):
    """Keep a finished :class:`~certsel.inspect.CertifiedSelection` as a certsel job (:func:`write`)."""
    members = [sel.members[n] for n in sel.names]
    items = list(members[0].run.ledger.ids)
    losses = {m.candidate: member_losses(m) for m in members}
    table = scores_table(sel.names, losses, sel.proc.needs_order)
    settings = {"front end": "inspect selection", "procedure": sel.procedure, "at_least": sel.at_least,
                "delta": sel.delta, "objective": sel.objective, "names": sel.names}
    return write(lambda path, fp: selection_result(sel, end, items, losses, path, fp), table, settings, home=home,
                 track=track)


def ranking_result(rk, losses: dict, path, data_fp: str):
    """A finished :class:`~certsel.inspect.CertifiedRanking`'s session as a ``pairwise`` job's result (each model's
    record: the samples its pairs used)."""
    from certsel.api import job_config
    from certsel.orchestrator.engine.derived import derive
    from certsel.orchestrator.inputs.jobdata import JobData

    raw = {"name": rk.name, "data": {"path": str(path)}, "policy": {"kind": "seq"}, "procedure": "pairwise",
           "delta": rk.delta, "seed": rk.seed, "budget": {"n": rk.cap},
           "pairwise": {"goal": rk.goal, "topk": rk.topk, "epsilon": rk.epsilon, "bet": rk.bet},
           "state": {"store": None if rk.store is None else str(rk.store)},
           "tracking": {"experiment": rk.experiment, **({"uri": rk.mlflow} if rk.mlflow else {})}}
    data = JobData(table=loss_table(rk.names, rk.order, losses, None), features=None, fingerprint=data_fp)
    for r in rk.session.records:  # its losses on every sample, where it scored them all
        every = [1.0 - v for v in (rk.models[r.name].scored or {}).values()]
        r.true_risk = float(np.mean(every)) if len(every) == len(rk.order) else None
    size = len(rk.order) * len(rk.names)
    res = rk.session.result(rk.outcome, job_config(raw), data, rounds=rk.result.positions,
                            full={"human": size, "judge": 0, "requests": size})
    return derive(res)


def write_ranking(rk, *, home=None, track: bool = True):
    """Keep a finished :class:`~certsel.inspect.CertifiedRanking` as a certsel job (:func:`write`)."""
    losses = rk.used_losses()
    table = scores_table(rk.names, losses, False)
    settings = {"front end": "inspect ranking", "delta": rk.delta, "epsilon": rk.epsilon, "goal": rk.goal,
                "topk": rk.topk, "bet": rk.bet, "seed": rk.seed, "names": rk.names}
    return write(lambda path, fp: ranking_result(rk, losses, path, fp), table, settings, home=home, track=track)
