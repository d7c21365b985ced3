"""One claim, one test: the label store's ledger of claims, so that a certificate stays true however often it is rerun.

A **claim** is what a testing candidate certifies: R <= alpha for its human losses (the claim identity,
:meth:`~certsel.orchestrator.inputs.source_kind.SourceKind.claim_identity`; a recovery claim's transform is in it).
Its key is a digest of that identity and alpha, not of the seed, budget, procedure or front end that test it. The
ledger keeps each claim's **test**: the candidate's test state (its e-process and futility test, the labels it
consumed, in order) after each run, with the first run's seed and delta. A later run of the same claim continues that
test: its policy is the recorded one (kind, bet, horizon, judge ratio), it starts from the recorded state, and it labels
new items only, in the first run's order, so the e-process of every run of the claim is one test supermartingale on one
sequence of fresh draws. Ville's inequality bounds the chance that it *ever* reaches 1/delta under the null, however
many runs looked at it and whatever made them run again (docs/statistics.md, "Reruns").

A job holds its claims while it runs (a row of outcome ``running``) and records its run by compare-and-set, so the runs
of a claim form one chain. A rerun of the same configuration (e.g. ``--fresh``) starts from the state the original
started from, so it recomputes that job exactly and adds no run; a job's starting points are pinned in its folder, so a
resumed job continues from the state it began with.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sqlite3
import time
from dataclasses import dataclass

import numpy as np

from .contracts import ClaimRun
from .label_store import CLAIMS_DDL, FAMILIES_DDL, LOCK_TIMEOUT, PLACES_DDL, TABLES
from .labellog import pack, unpack
from .replay import JUDGE_ORDER_STREAM, item_order

CLAIMS_COLUMNS = TABLES["claims"]


def claim_key(identity: str, alpha: float) -> str:
    """The key of the claim "R <= alpha" on the losses of the store identity ``identity`` (alpha in the policy's units:
    the losses the test sees)."""
    canon = json.dumps({"identity": identity, "alpha": float(alpha), "claim": "risk <= alpha"}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:32]


RUNNING = "running"  # the outcome of a run whose job has not ended: it holds the claim (a lease)
DROPPED = "dropped"  # a run whose job is gone unfinished before it wrote its test ahead: it had bought no label
# a run whose job is gone unfinished after writing its test ahead: a test state like a finished run's, continued from
# there (its planned items first, their labels from the store), so no evidence it bought is dropped
INTERRUPTED = "interrupted"
PLANNED = ("planned_human", "planned_judge")  # a held run's planned item orders, in its state


@dataclass(frozen=True)
class Family:
    """A selection's family as its claims were tested in it: the procedure and its members' claim keys, in the
    procedure's order (a fixed sequence's from its start; the others' sorted). A family chosen after seeing its claims'
    evidence (a sequence re-sorted by the e-values so far, a Holm family shrunk to the leaders) is no family, so a
    rerun keeps the one its claims were first tested in."""

    procedure: str
    members: tuple[str, ...]
    job: str | None = None

    @classmethod
    def of(cls, procedure: str, keys, ordered: bool, job: str | None = None) -> Family:
        return cls(procedure, tuple(keys) if ordered else tuple(sorted(keys)), job)

    def change(self, now: Family) -> str | None:
        """How ``now`` differs from this family, in words (None: the same family)."""
        if (self.procedure, self.members) == (now.procedure, now.members):
            return None
        then, new = set(self.members), set(now.members)
        parts = [f"procedure {self.procedure} (now {now.procedure})"] if self.procedure != now.procedure else []
        if new - then:
            parts.append(f"{len(new - then)} candidate(s) added")
        if then - new:
            parts.append(f"{len(then - new)} of its {len(then)} candidates left out")
        if then == new:
            parts.append("its order changed")
        return ", ".join(parts)


class ClaimBusy(Exception):
    """The claim is under test by another job that has not ended (``job``): continuing from the state before it would
    start a second test beside it."""

    def __init__(self, job: str | None):
        super().__init__(job)
        self.job = job


class ClaimLedger:
    """The claims table of a label store's file. A job holds each claim it tests by a row of outcome ``running``
    (:meth:`begin`), which it completes when it ends (:meth:`finish`); one claim's runs form a chain, each continuing
    the one before."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
        self._db.execute(CLAIMS_DDL)
        self._db.execute(FAMILIES_DDL)
        self._db.execute(PLACES_DDL)

    def runs(self, claim: str) -> list[ClaimRun]:
        rows = self._db.execute(f"select {', '.join(CLAIMS_COLUMNS)} from claims where claim = ? order by seq",
                                (claim,)).fetchall()
        return [ClaimRun(*row[:-1], state=unpack(row[-1])) for row in rows]

    def plan(self, claim: str, fingerprint: str, job: str | None, pinned: int | None = None,
             stale=lambda job: False) -> tuple[ClaimRun | None, bool]:
        """(the run a job continues, whether it recomputes one already recorded). A resumed job continues its pinned run;
        the configuration of the claim's newest run recomputes from where that started; otherwise (another
        configuration, or this one after the claim moved on) the job continues the claim's newest run. Raises
        :class:`ClaimBusy` when another job holds the claim (``stale(job)``: that job is gone, its hold is dropped and
        the items it had planned stay consumed)."""
        runs = {r.seq: r for r in self.runs(claim)}
        mine = [r for r in runs.values() if job is not None and r.job == job
                and r.outcome not in (RUNNING, DROPPED, INTERRUPTED)]
        if mine:  # a finished job run again from its log (a multi-task job's task): recomputed, recorded already
            return runs.get(mine[0].base), True
        if pinned is not None:
            return runs.get(pinned), False
        # a check before the job (job None) does not see the job it is about to resume as another's: that holder has
        # this configuration (a resumed or auto-resumed job keeps its configuration's identity)
        held = [r for r in runs.values() if r.outcome == RUNNING and r.job != job and not stale(r.job)
                and not (job is None and r.fingerprint == fingerprint)]
        if held:
            raise ClaimBusy(held[-1].job)
        done = [r for r in runs.values() if r.outcome not in (RUNNING, DROPPED)]
        if done and done[-1].fingerprint == fingerprint and done[-1].outcome != INTERRUPTED:  # where it left it
            return runs.get(next(r for r in done if r.fingerprint == fingerprint).base), True
        # the newest run, also when this configuration ran before and the claim has moved on since: a rerun states
        # where the claim's test stands now, never an older run's outcome
        return (done[-1] if done else None), False

    def begin(self, claim: str, fingerprint: str, job: str, base: int, state: dict) -> None:
        """Hold the claim for ``job`` continuing run ``base`` (0: its first test); a job that holds it already (resumed)
        keeps its row. Raises :class:`ClaimBusy` when a run newer than ``base`` was recorded meanwhile."""
        with self._db:
            self._db.execute("begin immediate")
            if self._db.execute("select 1 from claims where claim = ? and job = ? and outcome = ?",
                                (claim, job, RUNNING)).fetchone():
                return
            newest = self._db.execute("select seq, job from claims where claim = ? and outcome not in (?, ?) order by "
                                      "seq desc limit 1", (claim, RUNNING, DROPPED)).fetchone()
            if (newest[0] if newest else 0) != base:
                raise ClaimBusy(newest[1])
            seq = self._db.execute("select coalesce(max(seq), 0) + 1 from claims where claim = ?", (claim,)).fetchone()[0]
            self._db.execute(f"insert into claims values ({', '.join('?' * len(CLAIMS_COLUMNS))})",
                             (claim, seq, fingerprint, job, base, 0, RUNNING, time.time(), pack(state)))

    def finish(self, claim: str, fingerprint: str, job: str | None, base: int, t: int, outcome: str,
               state: dict | None) -> ClaimRun | None:
        """Complete this job's run of the claim (``state`` None: it added no label, and holds the claim no more). A job
        without a held row (no job folder) adds its run if ``base`` is still the newest. Returns the run recorded."""
        with self._db:
            self._db.execute("begin immediate")
            held = self._db.execute("select seq from claims where claim = ? and job is ? and outcome = ?",
                                    (claim, job, RUNNING)).fetchone()
            if state is None:
                if held:
                    self._db.execute("delete from claims where claim = ? and seq = ?", (claim, held[0]))
                return None
            if held:
                seq = held[0]
                self._db.execute("update claims set t = ?, outcome = ?, created = ?, state = ? where claim = ? and "
                                 "seq = ?", (int(t), outcome, time.time(), pack(state), claim, seq))
            else:
                newest = self._db.execute("select coalesce(max(seq), 0) from claims where claim = ? and outcome not in "
                                          "(?, ?)", (claim, RUNNING, DROPPED)).fetchone()[0]
                if newest != base:  # another run was recorded meanwhile: this one would fork the test
                    raise ClaimBusy(None)
                seq = self._db.execute("select coalesce(max(seq), 0) + 1 from claims where claim = ?",
                                       (claim,)).fetchone()[0]
                self._db.execute(f"insert into claims values ({', '.join('?' * len(CLAIMS_COLUMNS))})",
                                 (claim, seq, fingerprint, job, base, int(t), outcome, time.time(), pack(state)))
        return ClaimRun(claim, seq, fingerprint, job, base, int(t), outcome, time.time(), state)

    def write_ahead(self, claim: str, job: str, t: int, state: dict) -> bool:
        """The test state of ``job``'s held run of the claim as it stands now (labels consumed, e-process, futility
        test), with the items the run planned: should the job never end, the claim continues from here
        (:data:`INTERRUPTED`). False: the job holds no run of it."""
        return self.write_ahead_all(job, [(claim, t, state)])[0]

    def write_ahead_all(self, job: str, entries) -> list[bool]:
        """:meth:`write_ahead` for each ``(claim, t, state)`` of ``entries``, in one transaction (a checkpoint of many
        candidates writes them together)."""
        wrote = []
        with self._db:
            self._db.execute("begin immediate")
            for claim, t, state in entries:
                row = self._db.execute("select seq, state from claims where claim = ? and job = ? and outcome = ?",
                                       (claim, job, RUNNING)).fetchone()
                if row is None:
                    wrote.append(False)
                    continue
                # the planned item orders (written under their older names by an earlier certsel, read as such)
                held = unpack(row[1], [*PLANNED, *(k.removeprefix("planned_") + "_items" for k in PLANNED)])
                planned = {k: held.get(k, held.get(k.removeprefix("planned_") + "_items")) for k in PLANNED}
                self._db.execute("update claims set t = ?, state = ? where claim = ? and seq = ?",
                                 (int(t), pack({**state, **planned}), claim, row[0]))
                wrote.append(True)
        return wrote

    def family(self, claim: str) -> Family | None:
        """The selection family the claim was first tested in (None: never in one)."""
        row = self._db.execute("select procedure, members, job from families where claim = ?", (claim,)).fetchone()
        return None if row is None else Family(row[0], tuple(json.loads(row[1])), row[2])

    def record_family(self, claims, family: Family) -> None:
        """``family`` for each of ``claims`` not in one yet (the first family a claim is tested in stays its own)."""
        with self._db:
            self._db.execute("begin immediate")
            self._db.executemany("insert or ignore into families values (?, ?, ?, ?, ?)",
                                 [(c, family.procedure, json.dumps(list(family.members)), family.job, time.time())
                                  for c in claims])

    def record_place(self, place: str, alpha: float, claim: str, job: str | None) -> None:
        """``claim`` was tested under ``place`` (a table file and a candidate's name) at level ``alpha``."""
        with self._db:
            self._db.execute("begin immediate")
            self._db.execute("insert or ignore into places values (?, ?, ?, ?, ?)",
                             (place, float(alpha), claim, job, time.time()))

    def at_place(self, place: str, alpha: float) -> list[tuple[str, str | None]]:
        """The (claim, job that first tested it) recorded under ``place`` at level ``alpha``, oldest first."""
        return self._db.execute("select claim, job from places where place = ? and alpha = ? order by created",
                                (place, float(alpha))).fetchall()

    def adopt(self, old: str, new: str) -> bool:
        """Move the claim recorded under key ``old`` (the identity of an earlier release, :meth:`~certsel.orchestrator.
        inputs.source_kind.SourceKind.legacy_claim_identity`) to key ``new``, with its family and release series, when
        nothing is recorded under ``new`` yet: the same claim keeps its one test across the change of key. True: it
        moved."""
        if old == new or not self._db.execute("select 1 from claims where claim = ?", (old,)).fetchone():
            return False  # nothing recorded under the earlier key (the common case): no write lock taken
        with self._db:
            self._db.execute("begin immediate")
            if (self._db.execute("select 1 from claims where claim = ?", (new,)).fetchone()
                    or not self._db.execute("select 1 from claims where claim = ?", (old,)).fetchone()):
                return False
            self._db.execute("update claims set claim = ? where claim = ?", (new, old))
            self._db.execute("update or ignore families set claim = ? where claim = ?", (new, old))
            rows = self._db.execute("select claim, members from families where members like ?", (f'%"{old}"%',))
            for claim, members in rows.fetchall():
                now = [new if m == old else m for m in json.loads(members)]
                self._db.execute("update families set members = ? where claim = ?", (json.dumps(now), claim))
            if self._db.execute("select 1 from sqlite_master where type = 'table' and name = 'series'").fetchone():
                self._db.execute("update or ignore series set claim = ? where claim = ?", (new, old))
        return True

    def drop(self, claim: str, seq: int, outcome: str) -> None:
        """Mark a run that will never end (its job is gone): its items stay consumed, its hold ends."""
        with self._db:
            self._db.execute("update claims set outcome = ? where claim = ? and seq = ?", (outcome, claim, seq))

    def close(self) -> None:
        self._db.close()


def continued_orders(base: ClaimRun, n_items: int, n: int, without_replacement: bool, planned=()):
    """A continued claim's item orders for a job with human-label budget ``n`` (the claim's total): the consumed items
    in their order, then the items not consumed in the order of the claim's first run (its seed: a rerun's seed cannot
    choose which items come next; i.i.d.: no item twice, human or judge; without replacement: each stream its own order
    over the table, as :func:`~certsel.workers.replay.label_orders`). ``planned``: (human, judge) items other runs of
    the claim planned and did not consume, consumed too. The judge ratio is the recorded test's. The new items depend
    on which items were consumed, never on their labels, so each is a fresh draw given the past.

    An interrupted base (its job gone after writing its test ahead) is continued on the rest of its own plan first, in
    its order, whatever ``n``: the labels it bought after its last write-ahead are in the store, so the test replays
    exactly what that run saw, at no cost, before any new item."""
    seed = base.state["seed"]
    used_h = np.asarray(base.state["human_items"], dtype=np.int64)
    used_j = np.asarray(base.state["judge_items"], dtype=np.int64)
    r = int(base.state["candidate"]["test"]["config"]["r"]) if _uses_judge(base) else 0
    rest_h = _without(np.asarray(base.state.get("planned_human", used_h), dtype=np.int64), used_h)
    rest_j = (_without(np.asarray(base.state.get("planned_judge", used_j), dtype=np.int64), used_j) if r
              else np.zeros(0, dtype=np.int64))[: r * rest_h.size]
    used_h, used_j = np.concatenate([used_h, rest_h]), np.concatenate([used_j, rest_j])
    gone_h = np.concatenate([used_h, *[np.asarray(h, dtype=np.int64) for h, _ in planned]])
    gone_j = np.concatenate([used_j, *[np.asarray(j, dtype=np.int64) for _, j in planned]])
    t = used_h.size
    if without_replacement:
        fresh_h = _without(item_order(n_items, seed), gone_h)
        fresh_j = _without(item_order(n_items, [int(seed), JUDGE_ORDER_STREAM]), gone_j)
        m = max(0, min(n - t, fresh_h.size, fresh_j.size // r if r else fresh_h.size))
        return np.concatenate([used_h, fresh_h[:m]]), np.concatenate([used_j, fresh_j[: r * m]])
    fresh = _without(item_order(n_items, seed), np.concatenate([gone_h, gone_j]))
    m = max(0, min(n - t, fresh.size // (1 + r)))
    return np.concatenate([used_h, fresh[:m]]), np.concatenate([used_j, fresh[m: m + r * m]])


def _without(order: np.ndarray, used: np.ndarray) -> np.ndarray:
    return order[~np.isin(order, used)]


def _uses_judge(run: ClaimRun) -> bool:
    return bool(np.any(np.asarray(run.state["candidate"]["test"]["config"]["rhos"]) != 0))


def pin_file(job_dir) -> pathlib.Path:
    """The job folder's file of the runs its claims continue (a resumed job continues the same ones)."""
    return pathlib.Path(job_dir) / "claims.json"


