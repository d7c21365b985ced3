"""The durable label log of a job: every label is written to disk before a policy sees it (docs/reliability.md, 'The
durable label log').

One SQLite file per candidate (``JOB_DIR/labels/<sha256 of the name>.db``: one writer, the actor that hosts the
candidate; names never become paths), in WAL mode with ``synchronous=FULL``: a committed label survives ``kill -9`` of
the actor or the driver, or a power loss. A row is (seq, role, item, loss, requests, response): ``requests`` is what
buying it cost at the model servers, ``response`` the answer it came from (the response-cache key for live sources);
(role, item) is unique.

:class:`LoggedSource` wraps a label source: a label in the log is served from it, a new one is bought and committed
before it is returned. Its counters are the log's up to the last row the candidate has used: a candidate asks for labels
in a deterministic order, so the rows it used are a prefix of the log, and a candidate rebuilt after a crash counts at
every step exactly the labels an uninterrupted one had bought, once each (even while replaying steps bought beyond the
driver's last checkpoint).

Policy snapshots (table ``snapshots``): every ``snapshot_every`` steps the host writes the candidate's whole state with
the batch history that led to it, keeping the newest :data:`KEEP_SNAPSHOTS`. A rebuilt candidate starts from the newest
snapshot whose history is a prefix of the driver's and replays only the later batches from the log. States are stored
without pickle (:func:`pack`), so reading a state directory never runs code from it.
"""

from __future__ import annotations

import array
import hashlib
import io
import json
import logging
import pathlib
import sqlite3

import numpy as np

from certsel.errors import first_line

from .contracts import LabelRows, LabelsPending
from .label_store import STORED

log = logging.getLogger(__name__)

KEEP_SNAPSHOTS = 2  # the newest, and the one before it (a driver checkpoint may lag one behind)


def pack(obj) -> bytes:
    """A state (nested dicts with string keys, lists, tuples, numbers, strings, None and NumPy arrays) as one ``.npz``
    blob: the arrays as they are, the rest as exact JSON (floats round-trip through ``repr``; Python ints of any size
    stay exact)."""
    arrays: dict = {}

    def walk(x):
        if isinstance(x, np.ndarray):
            if x.dtype == object:
                raise TypeError("object arrays cannot be stored in a snapshot")
            key = f"a{len(arrays)}"
            arrays[key] = x
            return {"__array__": key}
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise TypeError("snapshot dict keys must be strings")
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, tuple):
            return {"__tuple__": [walk(v) for v in x]}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, np.generic):
            return x.item()
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"cannot store a {type(x).__name__} in a snapshot")

    text = json.dumps(walk(obj), separators=(",", ":"))
    buf = io.BytesIO()
    np.savez(buf, __state__=np.array(text), **arrays)
    return buf.getvalue()


def unpack(blob: bytes, keys=None):
    """The inverse of :func:`pack` (no pickle: ``allow_pickle=False``). ``keys``: only these top-level keys of a dict
    state (those present), reading only their arrays (a write-ahead needs two of a state's many)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        tree = json.loads(str(z["__state__"]))
        if keys is not None:
            tree = {k: tree[k] for k in keys if k in tree}

        def walk(x):
            if isinstance(x, dict):
                if set(x) == {"__array__"}:
                    return z[x["__array__"]]
                if set(x) == {"__tuple__"}:
                    return tuple(walk(v) for v in x["__tuple__"])
                return {k: walk(v) for k, v in x.items()}
            if isinstance(x, list):
                return [walk(v) for v in x]
            return x

        return walk(tree)


def log_path(job_dir, candidate: str) -> pathlib.Path:
    """Where a candidate's log lives (a hash: candidate names never become paths)."""
    digest = hashlib.sha256(candidate.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return pathlib.Path(job_dir) / "labels" / f"{digest}.db"


class LabelLog:
    """One candidate's durable labels (see the module docstring)."""

    def __init__(self, path, candidate: str):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=full")
        self._db.execute("create table if not exists meta (key text primary key, value text not null)")
        self._db.execute("create table if not exists labels (seq integer primary key, role text not null, "
                         "item integer not null, loss real not null, requests integer not null, response text, "
                         "unique (role, item))")
        self._db.execute("create table if not exists snapshots (steps integer primary key, batches text not null, "
                         "state blob not null)")
        self._db.execute("create table if not exists journal (key text primary key, body text not null)")
        row = self._db.execute("select value from meta where key = 'candidate'").fetchone()
        if row is None:
            self._db.execute("insert into meta values ('candidate', ?)", (candidate,))
        elif row[0] != candidate:
            raise ValueError(f"{self.path} is the label log of {row[0]!r}, not {candidate!r}")
        self.candidate = candidate
        # compact: one dict entry per label, typed arrays by row (the log can be long)
        got = self._db.execute(f"select role = 'human', item, requests, coalesce(response = '{STORED}', 0) from labels "
                               "order by seq").fetchall()
        ints = np.array(got, dtype=np.int64).reshape(-1, 4)
        loss = np.array(self._db.execute("select loss from labels order by seq").fetchall(),
                        dtype=np.float64).reshape(-1)
        human, rows = ints[:, 0].astype(bool), np.arange(len(ints))
        self._pos = {"human": dict(zip(ints[human, 1].tolist(), rows[human].tolist(), strict=True)),
                     "judge": dict(zip(ints[~human, 1].tolist(), rows[~human].tolist(), strict=True))}
        self._loss = array.array("d", loss.tobytes())  # loss of each row
        self._cum = {}  # human labels, judge labels, requests in the first k rows
        for k, x in (("human", human), ("judge", ~human), ("requests", ints[:, 2]), ("reused", human & (ints[:, 3] > 0))):
            self._cum[k] = array.array("q", np.concatenate([[0], np.cumsum(x, dtype=np.int64)]).tobytes())

    def _add(self, role: str, item: int, loss: float, requests: int, response) -> None:
        self._pos[role][item] = len(self._loss)
        self._loss.append(loss)
        for k, add in (("human", role == "human"), ("judge", role == "judge"), ("requests", requests),
                       ("reused", role == "human" and response == STORED)):
            self._cum[k].append(self._cum[k][-1] + add)

    def __len__(self) -> int:
        return len(self._loss)

    def items(self, role: str) -> list[int]:
        """The items with a ``role`` label in the log."""
        return list(self._pos[role])

    def row_of(self, role: str, item: int) -> int | None:
        return self._pos[role].get(item)

    def loss(self, role: str, item: int) -> float:
        return self._loss[self._pos[role][item]]

    def losses_at(self, rows: np.ndarray) -> np.ndarray:
        """The losses of rows ``rows`` (a new array)."""
        if rows.size == 0:
            return np.zeros(0)
        view = np.frombuffer(self._loss, dtype=np.float64)
        out = view[rows]  # fancy indexing copies
        del view  # release the buffer: the array grows on the next append
        return out

    def counts(self, rows: int) -> tuple[int, int, int]:
        """Human labels, judge labels and requests in the first ``rows`` rows."""
        return self._cum["human"][rows], self._cum["judge"][rows], self._cum["requests"][rows]

    def reused(self, rows: int) -> int:
        """Human labels in the first ``rows`` rows that came from the label store."""
        return self._cum["reused"][rows]

    @property
    def totals(self) -> dict:
        return {k: v[-1] for k, v in self._cum.items()}

    def append(self, role: str, items, losses, requests: int, responses=None) -> None:
        """Commit labels (one transaction, fsync'd) before anyone uses them."""
        items = [int(i) for i in items]
        losses = [float(x) for x in losses]
        if not items:
            return
        costs = [int(requests)] + [0] * (len(items) - 1)  # the batch's cost, once
        responses = list(responses) if responses is not None else [None] * len(items)
        with self._db:  # BEGIN ... COMMIT
            self._db.execute("begin immediate")
            self._db.executemany("insert into labels (role, item, loss, requests, response) values (?, ?, ?, ?, ?)",
                                 [(role, i, x, c, r) for i, x, c, r in zip(items, losses, costs, responses,
                                                                          strict=True)])
        for i, x, c, r in zip(items, losses, costs, responses, strict=True):
            self._add(role, i, x, c, r)

    def rows(self) -> LabelRows:
        """Every label in purchase order."""
        got = self._db.execute("select item, role, loss from labels order by seq").fetchall()
        return LabelRows(np.array([g[0] for g in got], dtype=np.int64), np.array([g[1] for g in got], dtype=object),
                         np.array([g[2] for g in got], dtype=np.float64))

    def write_snapshot(self, batches: list[int], state: dict) -> None:
        """Store the state reached after the steps ``batches`` (labels consumed per step), replacing any other of that
        length, and drop all but the newest :data:`KEEP_SNAPSHOTS`; one fsync'd transaction."""
        blob = pack(state)
        with self._db:
            self._db.execute("begin immediate")
            self._db.execute("insert or replace into snapshots values (?, ?, ?)",
                             (len(batches), json.dumps([int(b) for b in batches]), blob))
            self._db.execute("delete from snapshots where steps not in "
                             "(select steps from snapshots order by steps desc limit ?)", (KEEP_SNAPSHOTS,))

    def latest_snapshot(self, batches: list[int]):
        """``(steps, state)`` of the newest snapshot whose history is a prefix of ``batches``, or None: a snapshot from
        further along (a step the driver never received) or from another history is not used."""
        want = [int(b) for b in batches]
        for steps, hist, blob in self._db.execute("select steps, batches, state from snapshots where steps <= ? "
                                                  "order by steps desc", (len(want),)).fetchall():
            if json.loads(hist) != want[:steps]:
                continue
            try:
                return int(steps), unpack(blob)
            except Exception as exc:  # unreadable: an older snapshot, or a replay from the log, is as exact
                log.warning("%s: ignoring the snapshot at step %d of %r (%s)", self.path, steps, self.candidate,
                            first_line(exc))
        return None

    def record(self, key: str, body: dict) -> None:
        """A label source's own durable record (:class:`~certsel.workers.contracts.Journal`), committed (fsync'd) before
        this returns."""
        with self._db:
            self._db.execute("begin immediate")
            self._db.execute("insert or replace into journal values (?, ?)", (str(key), json.dumps(body)))

    def records(self) -> dict[str, dict]:
        return {k: json.loads(b) for k, b in self._db.execute("select key, body from journal order by rowid")}

    def close(self) -> None:
        self._db.close()


class LoggedSource:
    """A label source whose every label goes through a :class:`LabelLog` first."""

    def __init__(self, source, log: LabelLog):
        self.source, self.log = source, log
        self.used = 0  # the candidate has used the log's first `used` rows
        prime = getattr(source, "prime", None)
        if prime is not None:  # e.g. the replay source: generations already paid for
            items = log.items("human") + log.items("judge")
            prime(np.array(items, dtype=np.int64))

    @property
    def n_items(self) -> int:
        return self.source.n_items

    @property
    def human_labels(self) -> int:
        return self.log.counts(self.used)[0]

    @property
    def judge_labels(self) -> int:
        return self.log.counts(self.used)[1]

    @property
    def requests(self) -> int:
        return self.log.counts(self.used)[2]

    @property
    def reused_labels(self) -> int:
        return self.log.reused(self.used)

    @property
    def baseline_labels(self) -> tuple[int, int] | None:
        """A paired source's baseline labels (bought, reused) by this process (None: not a paired source)."""
        return getattr(self.source, "baseline_labels", None)

    def _labels(self, role: str, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        log = self.log
        wanted = list(dict.fromkeys(items.tolist()))
        missing = [i for i in wanted if log.row_of(role, i) is None]
        if missing:
            before = self.source.requests
            try:
                losses = getattr(self.source, role)(np.array(missing, dtype=np.int64))
            except LabelsPending as pending:  # people answered part of it: that part is committed first
                got = missing[: pending.ready]
                log.append(role, got, pending.losses[: len(got)], self.source.requests - before)
                ready = next((k for k, i in enumerate(items.tolist()) if log.row_of(role, i) is None), items.size)
                raise LabelsPending(ready, pending.waiting) from None
            origins = getattr(self.source, "origins", None)  # a StoredSource's: which labels the store gave
            log.append(role, missing, losses, self.source.requests - before,
                       None if origins is None else [STORED if o else None for o in origins(role, missing)])
        rows = np.array([log.row_of(role, i) for i in items.tolist()], dtype=np.int64)
        if rows.size:
            self.used = max(self.used, int(rows.max()) + 1)
        return log.losses_at(rows)

    def human(self, items) -> np.ndarray:
        return self._labels("human", items)

    def judge(self, items) -> np.ndarray:
        return self._labels("judge", items)

    def losses(self, items) -> np.ndarray:
        return self.human(items)

    @property
    def log_rows(self) -> LabelRows:
        return self.log.rows()
