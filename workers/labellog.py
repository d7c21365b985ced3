"""The durable label log of a job: every label is written to disk before a policy sees it.

One SQLite file per candidate (``JOB_DIR/labels/<sha256 of the name>.db``: one writer per
file, the actor that hosts the candidate, and no candidate name ever becomes a path), in
WAL mode with ``synchronous=FULL``: a label whose transaction committed survives a
``kill -9`` of the actor, of the driver, or a power loss. A row is (seq, role, item, loss,
requests, response): ``requests`` is what buying it cost at the model servers, ``response``
identifies the answer it came from (the response-cache key for live sources). (role, item)
is unique: a label cannot be recorded twice.

:class:`LoggedSource` wraps a label source (:class:`~certsel.workers.replay.ReplaySource`
or :class:`~certsel.workers.live.LiveSource`): a label already in the log is served from
it, a new one is bought from the source and committed before it is returned. Its counters
are the log's, so a candidate rebuilt after a crash counts exactly the labels the job
bought, once each.
"""

from __future__ import annotations

import hashlib
import pathlib
import sqlite3

import numpy as np


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
        row = self._db.execute("select value from meta where key = 'candidate'").fetchone()
        if row is None:
            self._db.execute("insert into meta values ('candidate', ?)", (candidate,))
        elif row[0] != candidate:
            raise ValueError(f"{self.path} is the label log of {row[0]!r}, not {candidate!r}")
        self.candidate = candidate
        self._known = {"human": {}, "judge": {}}
        self.totals = {"human": 0, "judge": 0, "requests": 0}
        for role, item, loss, req in self._db.execute("select role, item, loss, requests from labels order by seq"):
            self._known[role][item] = loss
            self.totals[role] += 1
            self.totals["requests"] += req

    def known(self, role: str) -> dict:
        return self._known[role]

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
        self._known[role].update(zip(items, losses, strict=True))
        self.totals[role] += len(items)
        self.totals["requests"] += int(requests)

    def rows(self) -> dict:
        """Every label in purchase order: item, role, loss arrays."""
        got = self._db.execute("select item, role, loss from labels order by seq").fetchall()
        return {"item": np.array([g[0] for g in got], dtype=np.int64), "role": [g[1] for g in got],
                "loss": np.array([g[2] for g in got], dtype=np.float64)}

    def close(self) -> None:
        self._db.close()


class LoggedSource:
    """A label source whose every label goes through a :class:`LabelLog` first."""

    def __init__(self, source, log: LabelLog):
        self.source, self.log = source, log
        prime = getattr(source, "prime", None)
        if prime is not None:  # e.g. the replay source: generations already paid for
            items = list(log.known("human")) + list(log.known("judge"))
            prime(np.array(items, dtype=np.int64))

    @property
    def n_items(self) -> int:
        return self.source.n_items

    @property
    def human_labels(self) -> int:
        return self.log.totals["human"]

    @property
    def judge_labels(self) -> int:
        return self.log.totals["judge"]

    @property
    def requests(self) -> int:
        return self.log.totals["requests"]

    def _labels(self, role: str, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        known = self.log.known(role)
        missing = [i for i in dict.fromkeys(items.tolist()) if i not in known]
        if missing:
            before = self.source.requests
            losses = getattr(self.source, role)(np.array(missing, dtype=np.int64))
            self.log.append(role, missing, losses, self.source.requests - before)
        return np.array([known[i] for i in items.tolist()], dtype=np.float64)

    def human(self, items) -> np.ndarray:
        return self._labels("human", items)

    def judge(self, items) -> np.ndarray:
        return self._labels("judge", items)

    def losses(self, items) -> np.ndarray:
        return self.human(items)

    @property
    def log_rows(self) -> dict:
        return self.log.rows()
