"""The engine: one loop runs every job's rounds; :func:`run_job` is the body of ``certsel run``.

:func:`run_job` plans the job (:mod:`~certsel.orchestrator.engine.plan`), loads the candidates onto hosts
(:mod:`~certsel.orchestrator.engine.hosts`) and hands the job's :class:`Rounds` to :func:`run_rounds`, which owns what
every kind of job shares: resuming from the driver's checkpoint, rounds until done, the tracker's and progress hooks, a
checkpoint every ``state.snapshot_every`` rounds, and the result's timing. What a round does is the :class:`Rounds`
object's decision: :class:`~certsel.orchestrator.engine.selection.SelectionRounds` (a multiple-testing procedure) or
:class:`~certsel.orchestrator.engine.pairwise.PairwiseRounds` (a ranking: the pair policies in the driver ask the
models' label servers for losses).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from certsel.config import RunConfig

from certsel.orchestrator.engine.hosts import HostPool, assign
from certsel.orchestrator.engine.servers import AllAtOnce
from certsel.orchestrator.inputs.jobdata import JobData
from certsel.orchestrator.inputs.sources import source_of
from . import claims
from .derived import derive
from .pairwise import PairwiseRounds
from .pilot import start_from_pilot
from .plan import JobPlan
from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, dump_records, load_records
from certsel.orchestrator.engine.runtime import HostLost, LocalRuntime, RayRuntime, Runtime, RuntimeProblem
from .selection import SelectionRounds
from .state import read_checkpoint, write_checkpoint

__all__ = ["HostLost", "JobPlan", "JobResult", "LocalRuntime", "RayRuntime", "Rounds", "Runtime", "RuntimeProblem",
           "run_job", "run_rounds"]

log = logging.getLogger("certsel.job")


class Rounds(Protocol):
    """One kind of job's rounds, driven by :func:`run_rounds`."""

    kind: str  # the checkpoint's kind: a checkpoint of another kind is not resumed from

    def restore(self, saved: dict) -> Resume:
        """Take up the state of a driver checkpoint (its records are already loaded)."""

    def advance(self) -> list[CandidateRecord] | None:
        """One round; the records it moved (for the tracker), or None when the job is done."""

    def state(self) -> dict:
        """What a checkpoint holds beyond the records and the round number."""

    def result(self, rounds: int) -> JobResult:
        """The job's result after its last round."""


def run_rounds(rounds: Rounds, records: list[CandidateRecord], *, job_dir=None, every: int = 1, tracker=None,
               progress=None, t0: float | None = None, on_checkpoint=None) -> JobResult:
    """Run ``rounds`` to the end (see the module docstring); ``progress(records, round)`` after every round,
    ``tracker.on_round(moved)`` too; with ``job_dir``, resumed from its checkpoint and checkpointed every ``every``
    rounds, ``on_checkpoint()`` with each checkpoint."""
    t0 = time.perf_counter() if t0 is None else t0
    names = [r.name for r in records]
    n, resume = 0, None
    saved = None if job_dir is None else read_checkpoint(job_dir, rounds.kind, names)
    if saved is not None:  # the driver's records as they were; the rounds' own state from the checkpoint
        load_records(records, saved["records"])
        n = int(saved["round"])
        resume = rounds.restore(saved)
        if tracker is not None:
            tracker.on_round(records)
    while (moved := rounds.advance()) is not None:
        n += 1
        if log.isEnabledFor(logging.DEBUG):
            done = sum(r.finished for r in records)
            log.debug("round %d: %d candidates advanced, %d of %d settled, %d human labels in all", n, len(moved),
                      done, len(records), sum(r.n_human for r in records))
        if tracker is not None:
            tracker.on_round(moved)
        if job_dir is not None and n % every == 0:
            write_checkpoint(job_dir, {"kind": rounds.kind, "names": names, "round": n,
                                       "records": dump_records(records), **rounds.state()})
            if on_checkpoint is not None:
                on_checkpoint()
        if progress is not None:
            progress(records, n)
    res = rounds.result(n)
    res.resume, res.seconds = resume, time.perf_counter() - t0
    return res


def run_job(cfg: RunConfig, data: JobData, runtime: Runtime, *, progress=None, n_hosts: int | None = None,
            tracker=None, collect_labels: bool = True, job_dir=None, servers=None) -> JobResult:
    """Run one job on ``runtime`` (:class:`RayRuntime` or :class:`LocalRuntime`).

    With ``collect_labels`` the result carries every label bought (the ``labels.parquet`` artifact, from which the
    certificate can be recomputed). With ``job_dir`` every label goes to the durable log before a policy uses it, hosts
    snapshot their policies and the driver checkpoints every ``cfg.state.snapshot_every`` rounds: a dead host's
    candidates are rebuilt from snapshot + log, and a rerun starts from the last checkpoint and buys nothing twice.
    ``servers`` (a :class:`~certsel.orchestrator.engine.servers.FleetSchedule`, for ``live.serve``) decides which
    candidates run together, restarts lost servers and measures GPU time (``result.gpu``).
    """
    t0 = time.perf_counter()
    data = start_from_pilot(cfg, data)  # scheduling.start: pilot (a no-op when execute already ran it)
    plan = JobPlan(cfg, data, None if job_dir is None else str(job_dir))
    names = data.names
    n_hosts = runtime.default_hosts(len(names)) if n_hosts is None else n_hosts
    runtime.ensure_hosts(n_hosts)
    runtime.ship_by_value(plan.extensions())
    objective, true_risk = data.objective, data.true_risk
    records = [
        CandidateRecord(nm, k, None if objective is None else float(objective[k]),
                        None if true_risk is None else float(true_risk[k]))
        for k, nm in enumerate(names)
    ]
    schedule = AllAtOnce() if servers is None else servers
    schedule.set_needs(source_of(cfg).server_needs(plan.specs, schedule.prefetched))
    claims.prime(records, plan.specs)  # a continued claim starts where its test stands
    pool = HostPool(runtime, assign(names, n_hosts), plan, runtime.put(plan.rows), records, schedule)
    pool.load()
    rounds = (PairwiseRounds if plan.procedure.ranking else SelectionRounds)(plan, pool, records)
    claims.write_ahead(plan, pool, records, job_dir)  # before any label: the claims' tests as they start

    def checkpoint():  # the claims' tests as they stand, with the driver's checkpoint
        claims.write_ahead(plan, pool, records, job_dir)

    res = run_rounds(rounds, records, job_dir=job_dir, every=cfg.state.snapshot_every, tracker=tracker,
                     progress=progress, t0=t0, on_checkpoint=checkpoint)
    claims.record(plan, pool, records, set(res.certified), job_dir)
    res.recovered = pool.recovered
    res.gpu = schedule.usage()
    if collect_labels:
        res.labels = pool.labels(names)
    if data.pilot is not None:  # the pilot's labels are part of what the job bought: a judge label is
        # a target generation and a judge call, as every judge label is counted; a human label one generation
        p = data.pilot
        res.spent = {**res.spent, "human": res.spent["human"] + p.human_labels,
                     "judge": res.spent["judge"] + p.judge_labels,
                     "requests": res.spent["requests"] + 2 * p.judge_labels + p.human_labels}
    return derive(res)
