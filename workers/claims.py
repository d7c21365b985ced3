"""One claim, one test: the label store's ledger of claims, so that a certificate stays true however often it is rerun.

A **claim** is what a testing candidate certifies: R <= alpha for the losses its identity serves
(:mod:`~certsel.workers.label_store`; a recovery claim's transform is in its identity). Its key is a digest of the
identity and alpha, not of the seed, budget, level, procedure or front end that test it. The ledger keeps each claim's
**test**: the candidate's test state (its e-process and futility test, the labels it consumed, in order) after each run
that tested it. A later run of the same claim continues that test: its policy is the recorded one (kind, bet, horizon,
judge ratio), it starts from the recorded state, and it labels new items only (the consumed ones removed from its own
seeded order), so the e-process of every run of the claim is one test supermartingale on one sequence of fresh draws.
Ville's inequality bounds the chance that it *ever* reaches 1/delta under the null, however many runs looked at it and
whatever made them run again (docs/statistics.md, "Reruns").

A rerun of the same configuration (the same job identity, e.g. ``--fresh``) starts from the state the original started
from, so it recomputes that job exactly and adds no run to the claim. A job's starting points are pinned in its folder,
so a resumed job continues from the state it began with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sqlite3
import time
import numpy as np

from .contracts import ClaimRun, ClaimStart
from .label_store import CLAIMS_DDL, LOCK_TIMEOUT, TABLES
from .labellog import pack, unpack
from .replay import JUDGE_ORDER_STREAM, item_order

CLAIMS_COLUMNS = TABLES["claims"]


def claim_key(identity: str, alpha: float) -> str:
    """The key of the claim "R <= alpha" on the losses of the store identity ``identity`` (alpha in the policy's units:
    the losses the test sees)."""
    canon = json.dumps({"identity": identity, "alpha": float(alpha), "claim": "risk <= alpha"}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:32]


class ClaimLedger:
    """The claims table of a label store's file."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
        self._db.execute(CLAIMS_DDL)

    def runs(self, claim: str) -> list[ClaimRun]:
        rows = self._db.execute(f"select {', '.join(CLAIMS_COLUMNS)} from claims where claim = ? order by seq",
                                (claim,)).fetchall()
        return [ClaimRun(*row[:-1], state=unpack(row[-1])) for row in rows]

    def base(self, claim: str, fingerprint: str, pinned: int | None = None) -> ClaimRun | None:
        """The run a job of configuration ``fingerprint`` continues: the pinned one (a resumed job), the one the same
        configuration continued before (an exact recomputation), else the claim's latest (None: a first test)."""
        runs = {r.seq: r for r in self.runs(claim)}
        if pinned is not None:
            return runs.get(pinned)
        same = [r for r in runs.values() if r.fingerprint == fingerprint]
        if same:
            return runs.get(same[0].base)
        return runs[max(runs)] if runs else None

    def record(self, claim: str, fingerprint: str, job: str | None, base: int, t: int, outcome: str,
               state: dict) -> ClaimRun | None:
        """Add the run of a job that continued ``base`` (one transaction); a configuration already recorded for the
        claim (a recomputation) adds nothing. Returns the run added."""
        with self._db:
            self._db.execute("begin immediate")
            if self._db.execute("select 1 from claims where claim = ? and fingerprint = ?",
                                (claim, fingerprint)).fetchone():
                return None
            seq = self._db.execute("select coalesce(max(seq), 0) + 1 from claims where claim = ?", (claim,)).fetchone()[0]
            run = ClaimRun(claim, seq, fingerprint, job, base, int(t), outcome, time.time(), state)
            self._db.execute(f"insert into claims values ({', '.join('?' * len(CLAIMS_COLUMNS))})",
                             (claim, seq, fingerprint, job, base, int(t), outcome, run.created, pack(state)))
        return run

    def close(self) -> None:
        self._db.close()


def continued_orders(base: ClaimRun, n_items: int, seed, n: int, without_replacement: bool):
    """A continued claim's item orders for a job with human-label budget ``n`` (the claim's total): the consumed items
    in their order, then the items not consumed in the job's own seeded order (i.i.d.: no item twice, human or judge;
    without replacement: each stream its own order over the table, as :func:`~certsel.workers.replay.label_orders`).
    The judge ratio is the recorded test's. The new items depend on which items were consumed, never on their labels,
    so each is a fresh draw given the past."""
    used_h = np.asarray(base.state["human_items"], dtype=np.int64)
    used_j = np.asarray(base.state["judge_items"], dtype=np.int64)
    r = int(base.state["candidate"]["test"]["config"]["r"]) if _uses_judge(base) else 0
    t = used_h.size
    if without_replacement:
        fresh_h = _without(item_order(n_items, seed), used_h)
        fresh_j = _without(item_order(n_items, [int(seed), JUDGE_ORDER_STREAM]), used_j)
        m = max(0, min(n - t, fresh_h.size, fresh_j.size // r if r else fresh_h.size))
        return np.concatenate([used_h, fresh_h[:m]]), np.concatenate([used_j, fresh_j[: r * m]])
    fresh = _without(item_order(n_items, seed), np.concatenate([used_h, used_j]))
    m = max(0, min(n - t, fresh.size // (1 + r)))
    return np.concatenate([used_h, fresh[:m]]), np.concatenate([used_j, fresh[m: m + r * m]])


def _without(order: np.ndarray, used: np.ndarray) -> np.ndarray:
    return order[~np.isin(order, used)]


def _uses_judge(run: ClaimRun) -> bool:
    return bool(np.any(np.asarray(run.state["candidate"]["test"]["config"]["rhos"]) != 0))


def pin_file(job_dir) -> pathlib.Path:
    """The job folder's file of the runs its claims continue (a resumed job continues the same ones)."""
    return pathlib.Path(job_dir) / "claims.json"


def with_judge_items(start: ClaimStart, arrays):
    """The job's shared arrays with this candidate's own item order (a continued claim), else as they are."""
    if not start.continued:
        return arrays
    return dataclasses.replace(arrays, human_items=start.human_items, judge_items=start.judge_items)
