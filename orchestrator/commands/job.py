"""``certsel run``: validate everything, then track, run and report one selection job.

Order matters for the "no half-written run" rule: the config, the data, the tracking store
and the Ray connection are all checked *before* the MLflow parent run is created, so bad
input leaves no run at all (an :class:`~certsel.errors.InputError`, exit status 2); once
runs exist, any failure marks them FAILED (KILLED on Ctrl-C) and propagates as a
:class:`~certsel.errors.JobError` (exit status 1), errors Ray re-raises from an actor
included.
"""

from __future__ import annotations

import logging
import pathlib
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from certsel.config import RunConfig
from certsel.errors import InputError, first_line, job_error

from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.pilot import start_from_pilot
from certsel.orchestrator.engine.runtime import RayRuntime
from certsel.orchestrator.engine.servers import FleetSchedule
from certsel.orchestrator.engine.state import JobState, config_fingerprint
from certsel.orchestrator.inputs.feasibility import feasibility_warning
from certsel.orchestrator.inputs.source_kind import SourceKind
from certsel.orchestrator.inputs.sources import load_job_data, source_of
from certsel.orchestrator.outputs.paths import output_dir, output_file
from certsel.orchestrator.outputs.report import write_report
from certsel.orchestrator.outputs.tracking import JobTracker, precheck
from certsel.orchestrator.results.records import CandidateRecord, JobResult

from .stages import LOADING, LOGGING, RAY, REPORT, ROUNDS, RUNS, STOPPING, TRACKING, StageClock

log = logging.getLogger(__name__)


def execute(cfg: RunConfig, *, progress=None, output=None, track: bool = True, resume: str | None = None,
            durable: bool = True, on_job=None, warn=None, check_outputs=(),
            parent_run: str | None = None, data=None, on_servers=None, on_stage=None) -> tuple[JobResult, str | None]:
    """Run ``cfg`` end to end; returns the result and the MLflow parent run id.

    With ``durable`` (the default) the job keeps its labels in ``cfg.state.dir`` and resumes
    an unfinished job with the same configuration (or the job ``resume``), see
    :mod:`certsel.orchestrator.engine.state`; ``on_job(state)`` is told which job runs; ``warn(line)``
    gets warnings about the job before it runs (default: the logging module).

    The outputs (report.html, report.md, selection.json, labels.parquet, plots) go to
    ``output``, else to the job's folder (``cfg.state.dir/JOB_ID``), else (not durable) only
    to MLflow; ``result.output_dir`` and ``result.files`` say where. ``check_outputs`` are
    ``(path, option)`` pairs of further files the caller will write: like ``output``, they are
    checked before anything starts. ``parent_run`` nests the job's MLflow run under that run
    (a task of a multi-task job); ``data`` is the job's data when the caller has loaded and
    checked it already (:func:`~certsel.orchestrator.inputs.sources.load_job_data`).
    ``on_servers(status)`` is told, every second while the job runs, which of the job's own
    servers (``live.serve``) are up and which wait for Ray to place them, with the seconds
    waited (:meth:`~certsel.workers.server_fleet.ServerFleet.status`): the progress line shows them.
    ``on_stage(name)`` is told when each stage starts (:mod:`certsel.orchestrator.commands.stages`);
    ``result.stages`` holds their seconds. The MLflow store opens in a thread while Ray starts.
    """
    clock = StageClock(on_stage)
    started = time.time()
    if output is not None:
        output = output_dir(output, "--output")
    for path, what in check_outputs:
        output_file(path, what)
    if data is None:
        with clock.stage(LOADING):
            data = load_job_data(cfg)
    data = start_from_pilot(cfg, data)  # before the runs are created: they are the tested configs
    try:
        note = feasibility_warning(data.policy_config(cfg), len(data.names), data.n_items)
    except Exception as exc:  # advisory only: a user strategy that fails here fails in the job too, tracked
        log.debug("feasibility check skipped (%s)", first_line(exc))
        note = None
    if note is not None:
        (warn or log.warning)(note)
    if track:
        precheck(cfg.tracking.uri)
    job = None
    if durable:
        job = JobState.open(cfg.state.dir, config_fingerprint(cfg, data.fingerprint), resume=resume,
                            auto=cfg.state.resume == "auto")
        job.update(name=cfg.name)
        if on_job is not None:
            on_job(job)
    tracker = run_id = servers = runtime = None
    pool = ThreadPoolExecutor(1, thread_name_prefix="certsel-mlflow")
    try:
        if track:  # the store opens (imports, migrations of a new SQLite file) while Ray starts

            def open_store():
                with clock.stage(TRACKING, tell=False):
                    return JobTracker(cfg.tracking.uri, cfg.tracking.experiment)

            opening = pool.submit(open_store)
        try:
            with clock.stage(RAY):
                runtime = RayRuntime(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.max_actors)
                # the hosts' worker processes boot (imports) while the runs are created
                runtime.ensure_hosts(runtime.default_hosts(len(data.names)))
        except InputError:  # no cluster: a job created just now leaves nothing behind
            if job is not None and not job.resumed:
                job.discard()
                job = None
            raise
        kind = source_of(cfg)
        if kind.prepare_stage is not None:
            with clock.stage(kind.prepare_stage):
                cfg, data, servers = prepare_source(kind, cfg, data, on_servers)
        if track:
            tracker = opening.result()
            obj = data.objective
            with clock.stage(RUNS):
                records = [CandidateRecord(n, k, None if obj is None else float(obj[k]))
                           for k, n in enumerate(data.names)]
                run_id = tracker.start(cfg, data, records, job=job, parent_run=parent_run, started=started)
            if job is not None:
                job.update(mlflow_runs=[*job.meta.get("mlflow_runs", []), run_id])
        try:
            with clock.stage(ROUNDS):
                result = run_job(cfg, data, runtime, progress=progress, tracker=tracker,
                                 job_dir=None if job is None else job.dir, servers=servers)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # while the job ran: a job error, whatever its type
            raise job_error(exc) from exc
        result.stages = clock.seconds  # the clock's own dict: the stages after this one land in it too
        result.job_id = None if job is None else job.job_id
        if tracker is not None:
            result.tracking = {"uri": tracker.uri, "experiment_id": tracker.experiment_id, "run_id": run_id}
        with tempfile.TemporaryDirectory() as tmp:
            folder = output or (job.dir if job is not None else None)
            with clock.stage(REPORT):
                files = write_report(result, folder or tmp)
            if folder is not None:
                result.output_dir, result.files = pathlib.Path(folder), files
            if tracker is not None:
                with clock.stage(LOGGING):
                    tracker.finish(result, files)
        if job is not None:
            job.update(status="finished", mlflow_run=run_id, finished=True, name=cfg.name, selected=result.selected,
                       output=None if result.output_dir is None else str(result.output_dir))
        return result, run_id
    except BaseException as exc:  # the runs say how it ended: KILLED on Ctrl-C, FAILED otherwise
        killed = isinstance(exc, KeyboardInterrupt)
        if tracker is not None:
            tracker.fail("KILLED" if killed else "FAILED")
        if job is not None:
            job.update(status="interrupted" if killed else "failed")
        raise
    finally:
        pool.shutdown(wait=True)  # a store still opening after a failure finishes first (it creates no run)
        source_of(cfg).release(cfg, data)
        if servers is not None:
            servers.close()
        if runtime is not None:
            with clock.stage(STOPPING):
                runtime.close()
        if job is not None:
            job.release()


def prepare_source(kind: SourceKind, cfg: RunConfig, data, on_servers=None):
    """The job's source kind ``kind`` prepares the job before any tracking run exists
    (:meth:`~certsel.orchestrator.inputs.source_kind.SourceKind.prepare`), after the job's own
    model servers are started when it has any (the fleet that starts each one on its first
    cache miss, :mod:`certsel.orchestrator.engine.servers`; a server that no node can hold is
    an error here). Returns the config and data the job runs with and the
    :class:`FleetSchedule` (or None); the fleet is closed if preparing fails."""
    specs = kind.server_specs(cfg)
    fleet = FleetSchedule.start(specs) if specs else None
    try:
        if fleet is not None and on_servers is not None:  # from here on: the servers started while preparing
            fleet.watch(on_servers)
        cfg, data = kind.prepare(cfg, data, fleet)
    except BaseException:
        if fleet is not None:
            fleet.close()
        raise
    return cfg, data, fleet
