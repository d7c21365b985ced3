"""One job's life, the same for every front end (``certsel run``, the Python API, ``certsel gate``,
``certsel.inspect``): its folder opened (or resumed), its MLflow run, then finished, failed or cancelled, with the
certificate, report and MLflow artifacts written once, at the end.

A :class:`JobLifecycle` is a context manager: leaving it on an exception marks the MLflow run FAILED (KILLED on
Ctrl-C) and the folder ``failed`` (``interrupted``), so a rerun resumes it; leaving it at all releases the folder's
lock. Between :meth:`~JobLifecycle.track` and :meth:`~JobLifecycle.finish` the front end runs the job its own way
(the Ray rounds, inspect's tasks).
"""

from __future__ import annotations

import pathlib
import tempfile
import time

from certsel.orchestrator.engine.state import JobState
from certsel.orchestrator.outputs.plots import write_plots
from certsel.orchestrator.outputs.report import write_report
from certsel.orchestrator.outputs.tracking import TrackedJob
from certsel.orchestrator.results.records import JobResult

from .stages import LOGGING, REPORT, RUNS, StageClock


class JobLifecycle:
    """A job's folder (``job``, None for a job that keeps none) and MLflow run, from start to end."""

    def __init__(self, job: JobState | None, clock: StageClock | None = None, started: float | None = None):
        self.job, self.clock = job, clock if clock is not None else StageClock()
        self.tracker = None
        self.run_id: str | None = None
        self.started = time.time() if started is None else started

    @classmethod
    def open(cls, root, fingerprint: str, *, name: str, resume: str | None = None, auto: bool = True,
             reopen: bool = False, front_end: str | None = None, clock: StageClock | None = None,
             started: float | None = None) -> JobLifecycle:
        """The job with ``fingerprint`` under ``root``: the one ``resume`` names (``reopen``: even a finished one),
        else an unfinished one (``auto``), else a new folder."""
        job = JobState.open(root, fingerprint, resume=resume, auto=auto, reopen=reopen)
        job.update(name=name, **({"front_end": front_end} if front_end else {}))
        return cls(job, clock, started)

    @property
    def dir(self) -> pathlib.Path | None:
        return None if self.job is None else self.job.dir

    # -- the run ----------------------------------------------------------------------------------
    def track(self, tracker, cfg, data, records, *, parent_run: str | None = None) -> str:
        """Create the job's MLflow run with ``tracker`` (a :class:`~certsel.orchestrator.outputs.tracking.JobTracker`)
        and name it in the folder."""
        self.tracker = tracker
        with self.clock.stage(RUNS):
            self.run_id = tracker.start(cfg, data, records, job=TrackedJob.of(self.job), parent_run=parent_run,
                                        started=self.started)
        if self.job is not None:
            self.job.update(mlflow_runs=[*self.job.meta.get("mlflow_runs", []), self.run_id])
        return self.run_id

    # -- the end ----------------------------------------------------------------------------------
    def finish(self, result: JobResult, folder=None, *, files=(), draw=write_plots, track=None) -> JobResult:
        """The job's outputs: report and certificate into ``folder`` (default: the job's folder; none: only MLflow
        gets them), ``files`` already there listed with them, the MLflow run finished; the folder marked finished,
        or failed when no candidate could be evaluated (a rerun resumes it). ``draw``: what draws the plots (the
        output process's, :mod:`~certsel.orchestrator.outputs.output_process`); ``track``: creates the runs now (a job
        logged at its end: its store opened while the report was written)."""
        job = self.job
        result.job_id = None if job is None else job.job_id
        folder = folder if folder is not None else self.dir
        with tempfile.TemporaryDirectory() as tmp:
            with self.clock.stage(REPORT):
                written = write_report(result, folder or tmp, draw)
            if folder is not None:
                result.output_dir, result.files = pathlib.Path(folder), [*files, *written]
            if track is not None:
                track()
            if self.tracker is not None:
                t = self.tracker
                result.tracking = {"uri": t.uri, "experiment_id": t.experiment_id, "run_id": self.run_id}
                with self.clock.stage(LOGGING):
                    t.finish(result, written)
        self.mark_ended(result.cfg.name, result.output_dir, result.selected, result.evaluated)
        if result.cfg.state.store is not None:  # the label store too: CI caches the file
            checkpoint_file(pathlib.Path(result.cfg.state.store))
        return result

    def mark_ended(self, name: str, output, selected: str | None, evaluated: bool = True) -> None:
        """The folder marked finished (its outputs in ``output``), or failed when nothing could be evaluated (a rerun
        resumes it)."""
        if self.job is None:
            return
        output = None if output is None else str(output)
        if evaluated:
            self.job.update(status="finished", mlflow_run=self.run_id, finished=True, name=name, selected=selected,
                            output=output)
            checkpoint_logs(self.job.dir)
        else:
            self.job.update(status="failed", mlflow_run=self.run_id, name=name, output=output)

    def fail(self, exc: BaseException) -> None:
        """The job ended by ``exc``: its run KILLED (Ctrl-C) or FAILED, its folder interrupted or failed."""
        killed = isinstance(exc, KeyboardInterrupt)
        if self.tracker is not None:
            self.tracker.fail("KILLED" if killed else "FAILED")
        if self.job is not None:
            self.job.update(status="interrupted" if killed else "failed")

    def discard(self) -> None:
        """A job that never started leaves nothing behind (a resumed one keeps its folder)."""
        if self.job is not None and not self.job.resumed:
            self.job.discard()
            self.job = None

    def release(self) -> None:
        if self.job is not None:
            self.job.release()

    def __enter__(self) -> JobLifecycle:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if exc is not None:
                self.fail(exc)
        finally:
            self.release()


def checkpoint_logs(folder) -> int:
    """Fold every SQLite file's write-ahead log in a finished job's folder into the file and truncate it (a finished
    job's labels are read, never written again; the logs of a 100-candidate gate were most of its folder). Returns
    the bytes freed; a file another process still writes is left for it."""
    return sum(checkpoint_file(db) for db in sorted(pathlib.Path(folder).glob("**/*.db")))


def checkpoint_file(db: pathlib.Path) -> int:
    """One SQLite file's write-ahead log folded in and truncated (:func:`checkpoint_logs`); the bytes freed."""
    import sqlite3

    wal = db.with_name(db.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    if not size:
        return 0
    try:
        conn = sqlite3.connect(db, timeout=1.0)
        try:
            busy = conn.execute("pragma wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
    return 0 if busy else size - (wal.stat().st_size if wal.exists() else 0)

