"""The outputs that need heavy libraries, MLflow and matplotlib, written by a process of their own that imports them while
the job runs.

A job on a recorded table is milliseconds of statistics. Importing MLflow and opening its SQLite store takes seconds
(SQLAlchemy's and alembic's modules; a new store's migrations), and matplotlib most of one; in one process they come
after the statistics, one after the other (docs/results.md, "Overhead"). :class:`OutputProcess` is started as the job
starts and takes the heaviest of them off the job's path: with tracking, MLflow (it imports it while this process
loads the data, runs the rounds and draws the plots, opens the store once this process has found the job's input good,
:meth:`~OutputProcess.open_store`, then logs the runs it is handed); without, the plots (it imports matplotlib
meanwhile and draws them). What it writes is what this process would write: the same :class:`~.tracking.JobTracker`
and :func:`~.plots.write_plots`, given the same inputs.

A process that has done a job's outputs waits for the next job of this interpreter (a notebook's, a test process's):
:meth:`~OutputProcess.close` hands it back to the pool :func:`outputs_for` takes from, its libraries imported and its
stores' modules loaded, so a second job pays nothing to start one.

It is a fresh interpreter (``python -m``), not a ``multiprocessing`` child: those import the caller's main module again,
which reruns a user's script that calls :func:`certsel.api.run` at its top level. It ignores Ctrl-C (this process
handles it, and a store half-migrated would be a broken store) and ends when this process closes its end of the socket,
or dies.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from certsel.errors import first_line

def wanted(track: bool) -> bool:
    """Whether a new process of its own pays: the library it would take (MLflow with tracking, else matplotlib) is not
    imported in this one (a job in a process that has it, a notebook that imported MLflow, does it in-process)."""
    return ("mlflow" if track else "matplotlib") not in sys.modules


_IDLE: list[OutputProcess] = []  # processes whose job has ended, waiting for this interpreter's next one
_IDLE_LOCK = threading.Lock()


@atexit.register
def _end_idle() -> None:
    """The waiting processes end with this interpreter (they would at the socket's close; this reaps them)."""
    for process in list(_IDLE):
        process.end()


def outputs_for(cfg, track: bool) -> OutputProcess | None:
    """The output process of a job on ``cfg``: a waiting one, else one started now (a front end calls this as soon as
    the job file is read, so that its imports overlap everything after), or None where none pays: a job whose labels
    take long (:attr:`~certsel.orchestrator.inputs.source_kind.SourceKind.parallel`; its runs are logged as it goes),
    or one whose library this process has already."""
    from certsel.orchestrator.inputs.sources import source_of
    from .mlflow_store import resolve_uri

    if source_of(cfg).parallel:  # a process started before the job file was read is not wanted after all
        with _IDLE_LOCK:
            unwanted = [p for p in _IDLE if p.prestarted]
        for process in unwanted:
            process.end()
        return None
    with _IDLE_LOCK:
        while _IDLE:
            process = _IDLE.pop()
            if process.alive:
                process.prestarted = False  # this job's now, and waiting for a later one after it
                return process
            process.close()
    if not wanted(track):
        return None
    return OutputProcess(resolve_uri(cfg.tracking.uri) if track else None)


def prestart(track: bool) -> None:
    """Start a job's output process before its job file is read (the command line calls this first thing for a job):
    :func:`outputs_for` then takes it from the pool, its imports a few tenths of a second further on. A job that turns
    out not to want one (its labels take long, or its input is bad) leaves it waiting; it ends with this interpreter
    (killed at once: it was asked for nothing)."""
    from .mlflow_store import resolve_uri

    if wanted(track):
        process = OutputProcess(resolve_uri(None) if track else None)
        process.prestarted = True
        with _IDLE_LOCK:
            _IDLE.append(process)


class OutputProcessError(RuntimeError):
    """The output process ended without answering (it crashed or was killed)."""


@dataclass(frozen=True)
class _Failed:
    """An exception raised in the output process, as it crosses back."""

    error: BaseException


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling (certsel's own errors do), else a RuntimeError with its type and first line."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {first_line(exc, limit=300)}")


class RemoteTracker:
    """A :class:`~.tracking.JobTracker` living in the output process: the same methods, each a call there."""

    def __init__(self, process: OutputProcess, uri: str, experiment_id: str):
        self._process, self.uri, self.experiment_id = process, uri, experiment_id

    def start(self, cfg, data, records, job=None, parent_run: str | None = None, started: float | None = None) -> str:
        return self._process.call("start", cfg, data, records, job, parent_run, started)

    def on_round(self, records) -> None:
        self._process.call("on_round", records)

    def finish(self, result, artifacts: list) -> None:
        self._process.call("finish", result, artifacts)

    def fail(self, status: str = "FAILED") -> None:
        try:
            self._process.call("fail", status)
        except Exception:  # failing is best effort, as JobTracker.fail is
            pass


class OutputProcess:
    """The process, from this side: :meth:`open_store` (answered later, by :meth:`tracker`), :meth:`draw`, :meth:`close`.
    Calls are answered in the order they were made."""

    def __init__(self, track_uri: str | None):
        """``track_uri``: the tracking store (the process imports MLflow and its store's module first); None: it
        imports matplotlib first. Either serves both."""
        here, there = socket.socketpair()
        # exactly this process's module path (-P: not the working directory unless this process has it, as a notebook
        # or `python -c` does): a folder there named like a module (a checkout's certsel/, a user's mlflow.py) must
        # not shadow what this process imported, and what the job's plugins put on the path is found there too
        path = [os.getcwd() if p == "" else p for p in sys.path]
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": os.environ.get("MLFLOW_DISABLE_TELEMETRY", "true"),
               "PYTHONPATH": os.pathsep.join(path)}
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-m", __name__, str(there.fileno()), track_uri or ""],
            pass_fds=(there.fileno(),), stdin=subprocess.DEVNULL, env=env)
        there.close()
        self._conn = Connection(here.detach())
        self._sent = self._received = 0
        self._replies: dict[int, object] = {}
        self._opening: int | None = None
        self._store_asked = False
        self.prestarted = False  # by prestart, for a job not yet read

    def _send(self, op: str, *args) -> int:
        try:
            self._conn.send((op, args))
        except OSError:
            raise OutputProcessError(f"the output process ended (exit status {self._proc.poll()})") from None
        self._sent += 1
        return self._sent

    def _reply(self, ticket: int):
        while self._received < ticket:
            try:
                self._replies[self._received + 1] = self._conn.recv()
            except (EOFError, OSError):
                raise OutputProcessError(f"the output process ended before answering (exit status "
                                         f"{self._proc.wait()})") from None
            self._received += 1
        value = self._replies.pop(ticket)
        if isinstance(value, _Failed):
            raise value.error
        return value

    def call(self, op: str, *args):
        return self._reply(self._send(op, *args))

    def open_store(self, uri: str | None, experiment: str, plugins=()) -> None:
        """Open the tracking store there (imports, a new SQLite file's migrations), with the job's ``plugins`` imported
        first on this process's module path as it is now (the runs name a plugin's procedure or bet, and a waiting
        process was started for an earlier job); answered by :meth:`tracker`. The default store (``uri`` None) is
        resolved here, from this process's environment as it is now: a waiting process has the environment of the job
        it was started for (another $CERTSEL_HOME or $MLFLOW_TRACKING_URI, in a notebook or a test process)."""
        from .mlflow_store import resolve_uri

        self._opening = self._send("open", resolve_uri(uri), experiment, list(plugins), list(sys.path))
        self._store_asked = True

    def tracker(self) -> RemoteTracker:
        """The store opened by :meth:`open_store`, as a tracker (raises its :class:`~.mlflow_store.TrackingProblem`)."""
        uri, experiment_id = self._reply(self._opening)
        return RemoteTracker(self, uri, experiment_id)

    def draw(self, inputs, outdir) -> list:
        """:func:`~.plots.write_plots` there."""
        return self.call("plots", inputs, outdir)

    @property
    def alive(self) -> bool:
        return not self._conn.closed and self._proc.poll() is None

    def close(self) -> None:
        """This job is done with it. Every call answered: back to the pool for the next job. Else the process ends:
        before the store was asked for it is only importing and is stopped at once; after, it finishes what it does (a
        store mid-migration) and exits when this end closes. Closing twice is closing once."""
        if self._conn.closed:
            return
        if self._received == self._sent and self._proc.poll() is None:
            self._sent = self._received = 0
            self._replies.clear()
            self._opening, self._store_asked = None, False
            with _IDLE_LOCK:
                if self not in _IDLE:
                    _IDLE.append(self)
            return
        self.end()

    def end(self) -> None:
        """End the process (see :meth:`close`)."""
        with _IDLE_LOCK:
            if self in _IDLE:
                _IDLE.remove(self)
        if self._conn.closed:
            return
        if not self._store_asked:
            self._proc.kill()
        self._conn.close()
        try:
            self._proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _serve(conn: Connection, track_uri: str) -> None:
    """The process's side: import what its first job needs, then answer calls until the socket closes (importing what a
    later job needs when it first asks)."""
    if track_uri:
        _import_tracking(track_uri)
    else:
        _import_plots()
    tracker = None  # the job's, made by "open" (one job at a time)

    def open_store(uri, experiment, plugins, path):
        nonlocal tracker
        from certsel.config.loading import load_plugins

        from .tracking import JobTracker

        sys.path.extend(p for p in path if p not in sys.path)
        load_plugins(plugins, "job")  # what the runs name (a plugin's procedure, bet or policy) is registered here too
        tracker = JobTracker(uri, experiment)
        return tracker.uri, tracker.experiment_id

    def draw(inputs, outdir):
        return _import_plots().write_plots(inputs, outdir)

    ops = {
        "open": open_store,
        "plots": draw,
        "start": lambda *a: tracker.start(*a[:3], job=a[3], parent_run=a[4], started=a[5]),
        "on_round": lambda records: tracker.on_round(records),
        "finish": lambda result, artifacts: tracker.finish(result, artifacts),
        "fail": lambda status: tracker.fail(status),
    }
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ops[op](*args)
        except BaseException as exc:  # everything goes back: this process has no one else to tell
            reply = _Failed(_portable(exc))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def _import_tracking(track_uri: str) -> None:
    """MLflow, and the SQLite store's module for such a store (most of opening one is importing it)."""
    from .mlflow_store import _sqlite_path, no_telemetry

    no_telemetry()
    from . import tracking  # noqa: F401

    if _sqlite_path(track_uri) is not None:
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    else:
        import mlflow.tracking  # noqa: F401


def _import_plots():
    """matplotlib and its backend."""
    from . import plots

    plots._plt()
    return plots


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the job's process handles Ctrl-C and closes the socket
    _serve(Connection(int(argv[0])), argv[1])
    # every write was answered (committed) before the socket closed: leave without the interpreter's teardown of
    # MLflow and SQLAlchemy, which takes about a second the job would wait for
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # run as the module of its name, not as __main__: what it sends back (_Failed) must unpickle on the other side
    from certsel.orchestrator.outputs.output_process import main as serve

    serve(sys.argv[1:])
