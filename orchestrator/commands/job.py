"""``certsel run``: validate everything, then track, run and report one selection job.

No half-written run: the config, data, tracking store and Ray connection are checked *before* the MLflow parent run
is created, so bad input leaves no run (:class:`~certsel.errors.InputError`, exit status 2); once runs exist, any
failure marks them FAILED (KILLED on Ctrl-C) and propagates as a :class:`~certsel.errors.JobError` (exit status 1),
errors Ray re-raises from an actor included.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from certsel.config import RunConfig
from certsel.errors import InputError, first_line, job_error
from certsel.workers.label_store import check_store

from certsel.orchestrator.engine.claims import changed_measurements, claim_starts, moved_on
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.pilot import start_from_pilot
from certsel.orchestrator.engine.runtime import LocalRuntime
from certsel.orchestrator.engine.runtime_choice import RuntimeKind, choose_runtime
from certsel.orchestrator.engine.servers import FleetSchedule
from certsel.orchestrator.engine.session import new_records
from certsel.orchestrator.engine.state import Finished, JobState, config_fingerprint
from certsel.orchestrator.inputs.feasibility import feasibility_warning
from certsel.orchestrator.inputs.jobdata import JobData
from certsel.orchestrator.inputs.source_kind import SourceKind
from certsel.orchestrator.inputs.sources import load_job_data, source_of
from certsel.orchestrator.outputs.paths import output_dir, output_file
from certsel.orchestrator.outputs.mlflow_store import precheck
from certsel.orchestrator.outputs.output_process import OutputProcess, outputs_for
from certsel.orchestrator.outputs.plots import write_plots
from certsel.orchestrator.outputs.tracking import JobTracker
from certsel.orchestrator.results.records import JobResult

from .lifecycle import JobLifecycle
from .stages import LOADING, RAY, ROUNDS, STOPPING, TRACKING, StageClock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """How one job runs besides its configuration (:func:`execute`).

    ``durable``: keep the labels in ``cfg.state.dir`` and resume an unfinished job with the same configuration (or the
    job ``resume``; :mod:`certsel.orchestrator.engine.state`). The outputs go to ``output``, else the job's folder, else
    (not durable) only to MLflow (``track``). ``check_outputs``: ``(path, option)`` pairs of further files the caller
    will write, checked up front like ``output``. ``parent_run``: the MLflow run to nest under (a multi-task job's
    task); ``data``: already loaded and checked data.

    Callbacks: ``progress(records, round)`` after every round; ``on_job(state)`` when the job is known; ``warn(line)``
    before it runs (default: logging); ``on_servers(status)`` every second while the job's own servers (``live.serve``)
    are up and waiting; ``on_stage(name)`` as each stage starts (:mod:`certsel.orchestrator.commands.stages`)."""

    progress: Callable | None = None
    output: pathlib.Path | str | None = None
    track: bool = True
    resume: str | None = None
    durable: bool = True
    on_job: Callable | None = None
    warn: Callable | None = None
    check_outputs: tuple = ()
    parent_run: str | None = None
    data: JobData | None = None
    on_servers: Callable | None = None
    on_stage: Callable | None = None
    reopen: bool = False  # ``resume`` may name a finished job: run again from its log, buying nothing
    on_runtime: Callable | None = None  # told the runtime chosen (engine/runtime_choice.RuntimeChoice)
    outputs: OutputProcess | None = None  # started by the front end (output_process.outputs_for); closed here


def execute(cfg: RunConfig, options: RunOptions | None = None, **kw) -> tuple[JobResult, str | None]:
    """Run ``cfg`` end to end (``options``, or its fields as keywords); returns the result and the MLflow parent run
    id. ``result.output_dir`` and ``result.files`` say where the outputs went, ``result.stages`` how long each stage
    took."""
    o = options if options is not None else RunOptions(**kw)
    clock = StageClock(o.on_stage)
    started = time.time()
    # a recorded table's runs are logged when it ends (its rounds take milliseconds); a process of its own imports
    # MLflow meanwhile (or, untracked, matplotlib) where this one has not yet (outputs/output_process.py)
    deferred = not source_of(cfg).parallel
    outputs = o.outputs if o.outputs is not None or not deferred else outputs_for(cfg, o.track)
    try:
        output = None if o.output is None else output_dir(o.output, "--output")
        data = _checked_data(cfg, o, clock)
        for line in cfg.adapted:  # the defaults the table chose, each with the key that sets it
            (o.warn or log.warning)(line)
        if cfg.series is not None and cfg.series.releases is None:  # each release's place and level in its series
            from certsel.orchestrator.engine.series import in_series

            cfg = in_series(cfg, data)
        choice = choose_runtime(cfg)  # bad input (runtime: local where only Ray serves) before any folder exists
        life = _open_job(cfg, data, o, clock, started)
    except BaseException:
        if outputs is not None:
            outputs.close()
        raise
    with contextlib.ExitStack() as resources:  # released in reverse order, whatever happens
        if outputs is not None:
            resources.callback(outputs.close)
        resources.callback(life.release)
        # late-bound: release sees the cfg and data the job ran with (prepare_source may replace them)
        resources.callback(lambda: source_of(cfg).release(cfg, data))
        try:
            opening = None
            if o.track:  # opens while Ray starts and the job runs
                opening = _open_store(cfg, clock, resources) if outputs is None else outputs.open_store(
                    cfg.tracking.uri, cfg.tracking.experiment, cfg.plugins)
            runtime = _start_runtime(choice, cfg, data, life, clock, resources, o.on_runtime)
            kind = source_of(cfg)
            servers = None
            if kind.prepare_stage is not None:
                with clock.stage(kind.prepare_stage):
                    cfg, data, servers = prepare_source(kind, cfg, data, o.on_servers)
                if servers is not None:
                    resources.callback(servers.close)

            def track():
                with clock.stage(TRACKING):  # what the job waits for the store (it opened meanwhile)
                    tracker = opening.result() if outputs is None else outputs.tracker()
                life.track(tracker, cfg, data, new_records(data.names, data.objective), parent_run=o.parent_run)

            if o.track and not deferred:
                track()
            try:
                with clock.stage(ROUNDS):
                    result = run_job(cfg, data, runtime, progress=o.progress, tracker=life.tracker, job_dir=life.dir,
                                     servers=servers)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # while the job ran: a job error, whatever its type
                raise job_error(exc) from exc
            result.stages = clock.seconds  # the clock's own dict: the stages after this one land in it too
            # deferred: the runs after the report, then every round's step metrics at once (JobTracker.finish)
            life.finish(result, output, draw=outputs.draw if outputs is not None and not o.track else write_plots,
                        track=track if o.track and deferred else None)
            return result, life.run_id
        except BaseException as exc:  # the runs say how it ended: KILLED on Ctrl-C, FAILED otherwise
            life.fail(exc)
            raise


def _checked_data(cfg: RunConfig, o: RunOptions, clock: StageClock) -> JobData:
    """The job's data, loaded and checked with everything else that can be bad input (files to write, the tracking
    store, external servers, the label store) before any folder, Ray or run exists."""
    for path, what in o.check_outputs:
        output_file(path, what)
    data = o.data
    if data is None:
        with clock.stage(LOADING):
            data = load_job_data(cfg)
    data = start_from_pilot(cfg, data)  # before the runs are created: they are the tested configs
    _warn_if_hopeless(cfg, data, o.warn)
    if o.track:
        precheck(cfg.tracking.uri)
    source_of(cfg).precheck(cfg)  # external servers answer before any folder, Ray or run exists
    if cfg.state.store is not None:  # the store is one, and every claim tested before can be continued as set
        check_store(cfg.state.store)
        from certsel.config.ledger import default_store

        # a store named by the job: said at once; the default ledger's: said with the certificate (ledger_block)
        for line in changed_measurements(cfg, data):
            (o.warn or log.warning)(line)
        if (any(c is None for c in claim_starts(cfg, data)) and not cfg.proc.ranking
                and pathlib.Path(cfg.state.store) != default_store()):
            (o.warn or log.warning)(f"the {source_of(cfg).name} source has no label identity: its labels are not kept "
                                    "in the store, and each run is a test of its own (docs/gate.md, 'Reruns')")
    return data


def _open_store(cfg: RunConfig, clock: StageClock, resources: contextlib.ExitStack):
    """The tracking store opening in a thread (imports, migrations of a new SQLite file): a future of its tracker."""
    pool = resources.enter_context(ThreadPoolExecutor(1, thread_name_prefix="certsel-mlflow"))
    return pool.submit(JobTracker, cfg.tracking.uri, cfg.tracking.experiment)


def _start_runtime(choice, cfg: RunConfig, data, life: JobLifecycle, clock: StageClock,
                   resources: contextlib.ExitStack, on_runtime=None):
    """The runtime ``runtime:`` chooses (engine/runtime_choice.py; ``on_runtime`` is told the choice): in-process, or
    Ray, with the hosts' worker processes booting (imports) while the runs are created, stopped when the job ends. No
    cluster: a job created just now leaves nothing behind."""
    if on_runtime is not None:
        on_runtime(choice)
    if choice.kind is RuntimeKind.LOCAL:  # the same hosts, in this process: nothing to start or stop
        return LocalRuntime.like_ray(cfg.ray.num_cpus, cfg.ray.max_actors)
    try:
        with clock.stage(RAY):
            from certsel.orchestrator.engine.runtime import RayRuntime

            runtime = RayRuntime(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.max_actors)
            runtime.ensure_hosts(runtime.default_hosts(len(data.names)))
    except InputError:
        life.discard()
        raise
    resources.callback(_stop_runtime, runtime, clock)
    return runtime


def _warn_if_hopeless(cfg: RunConfig, data, warn) -> None:
    """The feasibility check's one line (advisory: a strategy that fails here fails in the job too, tracked)."""
    try:
        note = feasibility_warning(data.policy_config(cfg), len(data.names), data.n_items)
    except Exception as exc:
        log.debug("feasibility check skipped (%s)", first_line(exc))
        return
    if note is not None:
        (warn or log.warning)(note)


@dataclass(frozen=True)
class Answered:
    """A rerun answered by the finished job of the same configuration and data: nothing ran, no label was bought.
    ``certificate``: its certificate, marked ``answered_by`` it; ``mlflow_run``: its run in the tracking store named now
    (``logged``: logged there now, that store lacked it; None: not tracked)."""

    job_id: str
    output: pathlib.Path
    certificate: object  # outputs.selection_schema.Certificate
    mlflow_run: str | None
    logged: bool = False


def answer_finished(cfg: RunConfig, data, track: bool) -> Answered | None:
    """The finished job that answers a rerun of ``cfg`` (None: none, or no auto-resume), its run logged to the tracking
    store named now when that store does not hold it."""
    from certsel.orchestrator.outputs.selection_schema import parse
    from certsel.orchestrator.outputs.tracking import log_finished

    done = finished_job(cfg, data)
    if done is None:
        return None
    cert = finished_certificate(done, parse)
    run_id, logged = None, False
    if track:
        precheck(cfg.tracking.uri)
        run_id, logged = log_finished(cfg.tracking.uri, cfg.tracking.experiment, done.job_id, done.output, cert)
    return Answered(done.job_id, done.output, cert.model_copy(update={"answered_by": done.job_id}), run_id, logged)


def finished_certificate(done: Finished, parse):
    """A finished job's certificate, read with ``parse``; a file cut short or edited by hand is one line (pydantic's
    errors are ValueErrors too)."""
    import json

    where = done.output / "selection.json"
    try:
        return parse(json.loads(where.read_text()))
    except ValueError as exc:
        raise InputError(f"{where}: the finished job's certificate cannot be read ({first_line(exc)}); "
                         "--fresh runs the job again") from None


def finished_job(cfg: RunConfig, data) -> Finished | None:
    """The finished job this configuration and data would be (None: none, no auto-resume, or the ledger holds a later
    run of one of its claims): a rerun shows it instead of buying its labels again."""
    if cfg.state.resume != "auto":
        return None
    done = JobState.finished(cfg.state.dir, config_fingerprint(cfg, data.fingerprint))
    if done is not None and moved_on(cfg, data, pathlib.Path(cfg.state.dir) / done.job_id):
        return None  # a later run of another configuration moved its claims on: the rerun states where they stand
    return done


def _open_job(cfg: RunConfig, data, o: RunOptions, clock: StageClock, started: float) -> JobLifecycle:
    """The job's lifecycle over its durable folder: the unfinished one with this configuration, the one ``resume``
    names, or a new one (not durable: no folder)."""
    if not o.durable:
        return JobLifecycle(None, clock, started)
    life = JobLifecycle.open(cfg.state.dir, config_fingerprint(cfg, data.fingerprint), name=cfg.name,
                             resume=o.resume, auto=cfg.state.resume == "auto", reopen=o.reopen, clock=clock,
                             started=started)
    if o.on_job is not None:
        o.on_job(life.job)
    return life


def _stop_runtime(runtime, clock: StageClock) -> None:
    with clock.stage(STOPPING):
        runtime.close()


def prepare_source(kind: SourceKind, cfg: RunConfig, data, on_servers=None):
    """``kind`` prepares the job (:meth:`~certsel.orchestrator.inputs.source_kind.SourceKind.prepare`) before any
    tracking run exists, after starting the job's own server fleet if any (:mod:`certsel.orchestrator.engine.servers`;
    a server no node can hold is an error here). Returns the config and data the job runs with and the
    :class:`FleetSchedule` or None; the fleet is closed if preparing fails."""
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
