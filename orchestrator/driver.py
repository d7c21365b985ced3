"""The selection driver: :func:`run_job`, the body of ``certsel run``.

The driver owns the control flow; each step lives in its own module:

1. plan the job (:mod:`~certsel.orchestrator.plan`): one typed spec per candidate and the
   shared seeded item order (every candidate is labelled on the same items);
2. start or join the runtime (:mod:`~certsel.orchestrator.runtime`: Ray, or in-process) and
   load the candidates onto hosts (:mod:`~certsel.orchestrator.recovery`: one host per
   candidate up to the cluster's CPUs, packed beyond; lost hosts are rebuilt);
3. rounds (:mod:`~certsel.orchestrator.rounds` for FST / Bonferroni / Holm and any
   registered procedure, :mod:`~certsel.orchestrator.pairwise` for a ranking): advance the
   candidates the procedure schedules, settle them, stop the settled ones;
4. the result (:mod:`~certsel.orchestrator.result`): the procedure applied to the final
   evidence, the selection by objective, labels spent against the full-budget cost.
"""

from __future__ import annotations

import time

from certsel.config import RunConfig

from .jobdata import JobData
from .pairwise import run_pairwise
from .plan import JobPlan
from .records import CandidateRecord
from .recovery import HostPool, assign
from .result import JobResult
from .rounds import run_selection
from .runtime import HostLost, LocalRuntime, RayRuntime, Runtime, RuntimeProblem

__all__ = ["HostLost", "JobPlan", "JobResult", "LocalRuntime", "RayRuntime", "Runtime", "RuntimeProblem", "run_job"]


def run_job(cfg: RunConfig, data: JobData, runtime: Runtime, *, progress=None, n_hosts: int | None = None,
            tracker=None, collect_labels: bool = True, job_dir=None, servers=None) -> JobResult:
    """Run one selection job on ``runtime`` (:class:`RayRuntime` or :class:`LocalRuntime`).

    ``progress(records, round)`` is called after every round; ``tracker`` (if given) gets
    ``on_round(records)``. With ``collect_labels`` the result carries every label bought
    (the ``labels.parquet`` artifact: the certificate can be recomputed from it). With
    ``job_dir`` every label goes to the job's durable log before a policy uses it
    (:mod:`certsel.workers.labellog`), hosts snapshot their policies and the driver
    checkpoints its state every ``cfg.state.snapshot_every`` rounds: a host that dies is
    replaced and its candidates rebuilt from snapshot + log, and a rerun of the same job
    starts from the last checkpoint and buys nothing twice. ``servers`` (the job's
    :class:`~certsel.workers.serving.ServerPool`) lets the driver start a model server again
    on another node when its node is lost.
    """
    t0 = time.perf_counter()
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
    pool = HostPool(runtime, assign(names, n_hosts), plan, runtime.put(plan.rows), records, servers)
    pool.load()
    run = run_pairwise if plan.procedure.ranking else run_selection
    res = run(plan, pool, records, progress=progress, tracker=tracker, job_dir=job_dir, t0=t0)
    res.recovered = pool.recovered
    if collect_labels:
        res.labels = pool.labels(names)
    return res
