"""A job's durable state: its directory, its fingerprint, and resuming an unfinished job.

``STATE_DIR/JOB_ID/`` holds ``job.json`` (id, config fingerprint, status, MLflow run ids; written atomically) and
``labels/`` (the label logs of :mod:`certsel.workers.labellog`). An unfinished job is resumed by ``certsel run CONFIG
--resume JOB_ID``, or automatically when ``certsel run`` finds one with the same fingerprint (docs/reliability.md,
'Resuming a job').

Why resuming is exact and valid: every label is in the log before a policy uses it, and everything else (item orders,
Cer-Eval's partitions, the driver's rounds and decisions) is a deterministic function of the configuration, the seed and
the labels. The resumed driver starts from its last checkpoint (``driver.npz``, every ``state.snapshot_every`` rounds),
each candidate from its newest policy snapshot on the same history (exact copies of the states); both replay the later
steps with labels served from the log, reaching the state at the crash with no request. So e-values, decisions and label
counts are those of an uninterrupted run; the labels are the same random draws whichever process buys them, so the
e-processes are the same test supermartingales and Ville's inequality holds at every stopping time, including the one at
which the first driver died.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import pathlib
import shutil
import uuid
from dataclasses import dataclass

import filelock

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: listing and showing jobs imports no configuration layer
    from certsel.config import RunConfig
from certsel.errors import InputError

CHECKPOINT = "driver.npz"
log = logging.getLogger(__name__)


class StateProblem(InputError):
    """A job state that cannot be used (unknown id, other config): one-line message."""


def config_fingerprint(cfg: RunConfig, data_fingerprint: str) -> str:
    """What makes two runs the same job (:func:`certsel.config.identity.config_fingerprint`; imported here when called:
    listing and showing jobs imports no configuration layer)."""
    from certsel.config.identity import config_fingerprint as fingerprint

    return fingerprint(cfg, data_fingerprint)


def _write_atomic(path: pathlib.Path, payload) -> None:
    """Write ``payload`` (dict as JSON, or bytes) atomically: temporary file, fsync, rename, fsync of the directory."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb" if isinstance(payload, bytes) else "w") as f:
        if isinstance(payload, bytes):
            f.write(payload)
        else:
            json.dump(payload, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class JobState:
    """One job's directory and its ``job.json``."""

    def __init__(self, root: pathlib.Path, meta: dict):
        self.root, self.meta = root, meta
        self._lock = None

    def lock(self) -> bool:
        """Hold the job's lock for this process's lifetime (an OS lock, released when the process dies, even by
        kill -9): two drivers never write one job. False if held elsewhere."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(self.dir / "lock", thread_local=False)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            return False
        self._lock = lock
        return True

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @property
    def job_id(self) -> str:
        return self.meta["job_id"]

    @property
    def dir(self) -> pathlib.Path:
        return self.root / self.job_id

    @property
    def resumed(self) -> bool:
        return self.meta.get("attempts", 1) > 1

    def update(self, **fields) -> None:
        self.meta.update(fields)
        _write_atomic(self.dir / "job.json", self.meta)

    @classmethod
    def open(cls, root, fingerprint: str, *, resume: str | None = None, auto: bool = True,
             reopen: bool = False) -> JobState:
        """The job to run: ``resume`` (a job id), else the unfinished job with this fingerprint (``auto``), else a new
        one. ``reopen``: ``resume`` may name a finished job (it is run again from its checkpoint and label log, buying
        nothing: a multi-task job's finished task)."""
        root = pathlib.Path(root)
        if resume is not None:
            if not resume or any(c not in "0123456789abcdef" for c in resume):
                raise StateProblem(f"--resume: {resume!r} is not a job id (hex digits, as printed by certsel run)")
            path = root / resume / "job.json"
            if not path.is_file():
                raise StateProblem(f"--resume: no job {resume} in {root}")
            meta = _read(path)
            if meta.get("fingerprint") != fingerprint:
                raise StateProblem(f"--resume: job {resume} was run with a different configuration or data; "
                                   "resuming it with this one would mix two jobs' labels")
            if meta.get("status") == "finished" and not reopen:
                raise StateProblem(f"--resume: job {resume} already finished (certsel show {meta.get('mlflow_run')})")
            state = cls(root, meta)
            if not state.lock():
                raise StateProblem(f"--resume: job {resume} is running in another process")
            return state._resume()
        if auto and root.is_dir():
            found = [m for _, m in _jobs(root) if m.get("fingerprint") == fingerprint and m.get("status") != "finished"]
            for meta in sorted(found, key=lambda m: m.get("created", ""), reverse=True):
                state = cls(root, meta)
                if state.lock():  # not one that another driver is running right now
                    return state._resume()
        root.mkdir(parents=True, exist_ok=True)
        meta = {"job_id": uuid.uuid4().hex[:12], "fingerprint": fingerprint, "status": "running", "attempts": 1,
                "created": _now(), "mlflow_runs": []}
        state = cls(root, meta)
        state.dir.mkdir(parents=True)
        state.lock()
        state.update()
        return state

    @staticmethod
    def finished(root, fingerprint: str) -> Finished | None:
        """The newest finished job with this fingerprint whose certificate is on disk, or None."""
        root = pathlib.Path(root)
        done = [m for _, m in _jobs(root) if m.get("fingerprint") == fingerprint and m.get("status") == "finished"
                and m.get("output") and (pathlib.Path(m["output"]) / "selection.json").is_file()]
        m = max(done, key=lambda m: m.get("created", ""), default=None)
        return None if m is None else Finished(m["job_id"], pathlib.Path(m["output"]), m.get("mlflow_run"))

    def discard(self) -> None:
        """Remove the folder of a job that never ran (nothing was bought): the start failed."""
        self.release()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _resume(self) -> JobState:
        self.update(status="running", attempts=self.meta.get("attempts", 1) + 1, resumed=_now())
        return self


def write_checkpoint(job_dir, state: dict) -> None:
    """The driver's state after a round (records, round number, pairwise policies), written atomically: a crash leaves
    the previous checkpoint or this one."""
    from certsel.workers.labellog import pack  # here: listing jobs (certsel jobs, show) needs none of it

    _write_atomic(pathlib.Path(job_dir) / CHECKPOINT, pack({"format": 1, **state}))


def read_checkpoint(job_dir, kind: str, names: list[str]) -> dict | None:
    """The job's last driver checkpoint, or None (no checkpoint yet). One that cannot be read, or that is of another job
    shape, is not used (with a warning): the job then replays from its start, which is slower but just as exact."""
    path = pathlib.Path(job_dir) / CHECKPOINT
    if not path.is_file():
        return None
    from certsel.workers.labellog import unpack  # here: listing jobs (certsel jobs, show) needs none of it

    try:
        state = unpack(path.read_bytes())
        if state.get("format") != 1 or state.get("kind") != kind or state.get("names") != list(names):
            raise ValueError("written by another kind of job")
        return state
    except Exception as exc:  # a damaged file must not stop a resume: the log alone suffices
        log.warning("ignoring the driver checkpoint %s (%s); replaying the job from its start", path, exc)
        return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _jobs(root: pathlib.Path):
    """``(path, meta)`` of each readable ``job.json`` in ``root`` (none when ``root`` is missing)."""
    for path in root.glob("*/job.json"):
        meta = _read(path, strict=False)
        if meta is not None:
            yield path, meta


def _read(path: pathlib.Path, strict: bool = True) -> dict | None:
    try:
        meta = json.loads(path.read_text())
        if not isinstance(meta, dict) or "job_id" not in meta:
            raise ValueError
        return meta
    except (OSError, ValueError):
        if strict:
            raise StateProblem(f"{path}: not a readable job record") from None
        return None


@dataclass(frozen=True)
class Finished:
    """A finished job a rerun shows instead of running it again."""

    job_id: str
    output: pathlib.Path  # the folder with its selection.json
    mlflow_run: str | None


@dataclass(frozen=True)
class JobInfo:
    """A past or running job in a state folder (``certsel jobs``)."""

    job_id: str
    name: str
    status: str  # running (held by a live driver), finished, failed, interrupted, or unfinished (driver gone)
    created: str
    attempts: int
    selected: str | None
    bytes: int
    dir: pathlib.Path

    @property
    def report(self) -> pathlib.Path | None:
        path = self.dir / "report.html"
        return path if path.is_file() else None


def _held(job_dir: pathlib.Path) -> bool:
    """Whether a live driver holds the job's lock (it is running right now)."""
    if not (job_dir / "lock").exists():
        return False
    lock = filelock.FileLock(job_dir / "lock", thread_local=False)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        return True
    lock.release()
    return False


def list_jobs(root) -> list[JobInfo]:
    """The jobs in ``root``, newest first; folders without a readable job.json are skipped."""
    root = pathlib.Path(root)
    out = []
    for path, meta in _jobs(root):
        status = meta.get("status", "unknown")
        if status == "running" and not _held(path.parent):
            status = "unfinished"  # its driver died: `certsel run` resumes it
        size = sum(f.stat().st_size for f in path.parent.rglob("*") if f.is_file())
        out.append(JobInfo(meta["job_id"], meta.get("name", ""), status, meta.get("created", ""),
                           int(meta.get("attempts", 1)), meta.get("selected"), size, path.parent))
    return sorted(out, key=lambda j: j.created, reverse=True)


def find_certificate(root, ref: str) -> pathlib.Path | None:
    """The ``selection.json`` of the finished job in ``root`` whose job id or MLflow parent run id starts with ``ref``
    (what ``certsel run`` prints), read without MLflow; None when no job here matches. Two jobs matching are an error
    naming both."""
    root = pathlib.Path(root)
    if len(ref) < 4 or not root.is_dir():  # too short a prefix to mean one job
        return None
    hits = {}
    for path, meta in _jobs(root):
        ids = [meta.get("job_id", ""), *meta.get("mlflow_runs", [])]
        if any(i.startswith(ref) for i in ids if i):
            hits[meta.get("job_id", path.parent.name)] = pathlib.Path(meta.get("output") or path.parent)
    if len(hits) > 1:
        raise StateProblem(f"{ref} matches {len(hits)} jobs in {root} ({', '.join(sorted(hits))}): give more of the id")
    if not hits:
        return None
    found = next(iter(hits.values())) / "selection.json"
    return found if found.is_file() else None


def remove_job(root, job_id: str) -> int:
    """Delete a job's folder (its labels, checkpoints and outputs); returns the bytes freed. A job that a driver is
    running is refused."""
    job = next((j for j in list_jobs(root) if j.job_id == job_id), None)
    if job is None:
        raise StateProblem(f"no job {job_id} in {root}")
    if job.status == "running":
        raise StateProblem(f"job {job_id} is running in another process; stop it first")
    shutil.rmtree(job.dir)
    return job.bytes
