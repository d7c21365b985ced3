"""Labels kept across jobs: a rerun on the same model, task, item and settings reuses them.

The label log (:mod:`~certsel.workers.labellog`) makes one job crash-safe; the store makes a label bought by one job
available to the next (e.g. a CI gate rerun on an unchanged checkpoint). Labels are keyed by the candidate's
**identity** (a digest of everything that decides an item's loss,
:meth:`~certsel.orchestrator.inputs.source_kind.SourceKind.label_identity`), role and item. A source kind that cannot
say what decides its losses (a user's function, people) has no identity and never reuses a label.

Reuse keeps every guarantee: a stored label is the loss the source would return for that item (a function of the
identity and the item), and the job still asks for its items in its own seeded order, so the test sees the observations
it would have bought. One SQLite file (WAL, ``synchronous=FULL``) shared by jobs and processes; a label is written
before it is used.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sqlite3
import time

import numpy as np

from certsel.errors import InputError

STORED = "store"  # a label log row's ``response`` for a label taken from the store
LOCK_TIMEOUT = 60.0  # seconds a job waits for another process's write lock on the store before it gives up
# the store's tables and their columns: a file with other tables is someone else's database
TABLES = {"labels": ["identity", "role", "item", "loss"],
          "claims": ["claim", "seq", "fingerprint", "job", "base", "t", "outcome", "created", "state"],
          "series": ["series", "release", "claim", "candidate", "delta", "created"],
          "families": ["claim", "procedure", "members", "job", "created"],
          "places": ["place", "alpha", "claim", "job", "created"]}
LABELS_DDL = ("create table if not exists labels (identity text not null, role text not null, item integer not null, "
              "loss real not null, primary key (identity, role, item))")
# each claim's test, run by run (workers/claims.py)
CLAIMS_DDL = ("create table if not exists claims (claim text not null, seq integer not null, fingerprint text not null, "
              "job text, base integer not null, t integer not null, outcome text not null, created real not null, "
              "state blob not null, primary key (claim, seq))")

# the selection family each claim was first tested in: its procedure and its members' claims, in the procedure's
# order (workers/claims.py)
FAMILIES_DDL = ("create table if not exists families (claim text primary key, procedure text not null, members text "
                "not null, job text, created real not null)")


# the claims tested under each place (a table file and a candidate's name in it) and level: a claim new in a place
# that held another is one whose measurements changed there, which a job says (workers/claims.py)
PLACES_DDL = ("create table if not exists places (place text not null, alpha real not null, claim text not null, "
              "job text, created real not null, primary key (place, alpha, claim))")


# each release series' gated claims in order (orchestrator/engine/series.py)
SERIES_DDL = ("create table if not exists series (series text not null, release integer not null, claim text not null, "
              "candidate text not null, delta real not null, created real not null, primary key (series, release), "
              "unique (series, claim))")


def identity_key(identity: dict) -> str:
    """The store's key of a candidate's identity (a JSON-able mapping)."""
    canon = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:32]


def check_store(path) -> None:
    """Raise a one-line :class:`InputError` naming ``path`` when it cannot be the store: a folder, not an SQLite
    database (corrupt, or another kind of file), another program's database, or locked by another process for longer
    than :data:`LOCK_TIMEOUT`. It is read, never written: a file refused here is left as it was. A missing file is fine
    (the first job makes it)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise InputError(f"label store {path}: is a folder, not a file")
    if not path.exists():
        if not path.parent.is_dir() and path.parent.exists():
            raise InputError(f"label store {path}: {path.parent} is not a folder")
        return
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=LOCK_TIMEOUT)
    except sqlite3.Error as exc:
        raise InputError(f"label store {path}: cannot be opened ({exc})") from None
    try:
        tables = {name: [c[1] for c in db.execute(f"pragma table_info({name})")]
                  for (name,) in db.execute("select name from sqlite_master where type = 'table'")}
        if not tables.keys() <= TABLES.keys() or any(tables[t] != TABLES[t] for t in tables):
            raise InputError(f"label store {path}: another program's SQLite database (tables: "
                             f"{', '.join(sorted(tables)) or 'none'}), not a certsel label store")
        if db.execute("pragma quick_check").fetchone()[0] != "ok":
            raise InputError(f"label store {path}: corrupt (SQLite's quick_check fails); move it away to start anew")
    except sqlite3.OperationalError as exc:
        raise InputError(f"label store {path}: cannot be read ({exc})") from None
    except sqlite3.DatabaseError as exc:
        raise InputError(f"label store {path}: not an SQLite database, or corrupt ({exc})") from None
    finally:
        db.close()
    _check_unlocked(path)


def _check_unlocked(path: pathlib.Path) -> None:
    """A writer holding the store longer than the timeout: given up now, not in the middle of a job (a read-only file,
    e.g. one CI restored, is left to the job: its reads work)."""
    try:
        db = sqlite3.connect(path, timeout=LOCK_TIMEOUT, isolation_level=None)
    except sqlite3.Error:
        return
    try:
        db.execute("begin immediate")
        db.execute("rollback")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise InputError(f"label store {path}: locked by another process for more than {LOCK_TIMEOUT:g} s") \
                from None
    finally:
        db.close()


class LabelStore:
    """The store's file: ``(identity, role, item) -> loss``."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
        # several actors open the store at once: switching a new file to WAL takes a lock that SQLite's
        # busy timeout does not wait for, so the switch is retried (the driver makes the file first)
        for attempt in range(100):
            try:
                if self._db.execute("pragma journal_mode").fetchone()[0] != "wal":
                    self._db.execute("pragma journal_mode=wal")
                self._db.execute(LABELS_DDL)
                self._db.execute(CLAIMS_DDL)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.05)
        self._db.execute("pragma synchronous=full")

    def get(self, identity: str, role: str, items: list[int]) -> dict[int, float]:
        """The stored losses of ``items`` (those that are stored)."""
        out: dict[int, float] = {}
        for start in range(0, len(items), 500):  # SQLite's limit on bound parameters
            chunk = items[start:start + 500]
            marks = ",".join("?" * len(chunk))
            out.update(self._db.execute(f"select item, loss from labels where identity = ? and role = ? and item in "
                                        f"({marks})", (identity, role, *chunk)).fetchall())
        return out

    def put(self, identity: str, role: str, items, losses) -> None:
        """Store labels (one transaction, fsync'd); a label already stored is kept as it is."""
        with self._db:
            self._db.execute("begin immediate")
            self._db.executemany("insert or ignore into labels values (?, ?, ?, ?)",
                                 [(identity, role, int(i), float(x)) for i, x in zip(items, losses, strict=True)])

    def count(self, identity: str | None = None) -> int:
        if identity is None:
            return self._db.execute("select count(*) from labels").fetchone()[0]
        return self._db.execute("select count(*) from labels where identity = ?", (identity,)).fetchone()[0]

    def close(self) -> None:
        self._db.close()


class StoredSource:
    """A label source whose labels are taken from a :class:`LabelStore` when it holds them, and bought from ``source``
    (then stored) when it does not. ``reused_labels`` counts the human labels the store gave; :meth:`origins` says which
    of the last items asked came from it."""

    def __init__(self, source, store: LabelStore, identity: str):
        self.source, self.store, self.identity = source, store, identity
        self._served: dict[str, set[int]] = {"human": set(), "judge": set()}
        self._from_store: dict[str, set[int]] = {"human": set(), "judge": set()}

    @property
    def n_items(self) -> int:
        return self.source.n_items

    @property
    def human_labels(self) -> int:
        return len(self._served["human"])

    @property
    def judge_labels(self) -> int:
        return len(self._served["judge"])

    @property
    def requests(self) -> int:
        return self.source.requests

    @property
    def reused_labels(self) -> int:
        return len(self._from_store["human"])

    def prime(self, items) -> None:
        """Items whose generations were paid for before (the label log's, on a resume)."""
        prime = getattr(self.source, "prime", None)  # the replay source's: requests are counted as a live one's
        if prime is not None:
            prime(items)

    def origins(self, role: str, items) -> list[bool]:
        """Whether each of ``items`` (asked before, in ``role``) came from the store."""
        return [int(i) in self._from_store[role] for i in items]

    def _labels(self, role: str, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        wanted = list(dict.fromkeys(items.tolist()))
        have = self.store.get(self.identity, role, wanted)
        self._from_store[role].update(i for i in have if i not in self._served[role])
        missing = [i for i in wanted if i not in have]
        if missing:
            bought = np.asarray(getattr(self.source, role)(np.array(missing, dtype=np.int64)), dtype=np.float64)
            self.store.put(self.identity, role, missing, bought)
            have.update(zip(missing, bought.tolist(), strict=True))
        self._served[role].update(wanted)
        return np.array([have[i] for i in items.tolist()], dtype=np.float64)

    def human(self, items) -> np.ndarray:
        return self._labels("human", items)

    def judge(self, items) -> np.ndarray:
        return self._labels("judge", items)

    def losses(self, items) -> np.ndarray:
        return self.human(items)
