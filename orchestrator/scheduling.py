"""Which candidates to advance next, and when a candidate's fate is settled.

Pure bookkeeping over :class:`CandidateRecord` objects; no Ray, no I/O.

Why stopping early keeps every guarantee: a candidate is certified when the running
maximum of its e-process (or the end of its confidence sequence) crosses the level, and
that event is contained in "the e-process *ever* crosses the level within the budget",
whose probability Ville's inequality bounds by the level under the null, whatever rule
decided when to stop or how far to run. So the schedule may depend on every candidate's
data (e.g. FST's frontier) without touching validity, and:

* **FST**: the certified set is the longest certified prefix of the order. Labels go to
  the frontier (the first candidate not yet certified) and ``lookahead`` candidates after
  it; once a candidate has spent its budget without being certified, no candidate after it
  can join the prefix, so they are stopped (or never started). The certified set equals
  the full-budget one.
* **Bonferroni**: each candidate runs at level delta/K and stops once certified (or out of
  budget). The certified set equals the full-budget one. With ``prune``, candidates whose
  objective is no better than a certified one's stop too: the selection (the best
  certified objective) is still the full-budget one; the certified set is then a subset.
* **Holm**: with c candidates certified, the next one needs E >= (K - c)/delta. A
  candidate stopped at that level is in Holm's final set, and Holm applied to the final
  running maxima returns exactly the full-budget Holm set (the argument is in
  ``docs/driver.md``; the tests check it against the full-budget computation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

FINISHED = ("certified", "failed", "stopped", "skipped")


@dataclass
class CandidateRecord:
    """The driver's view of one candidate."""

    name: str
    index: int
    objective: float | None
    true_risk: float | None = None
    status: str = "pending"  # pending, running, certified, failed (budget spent / hopeless), stopped, skipped
    reason: str = ""
    n_human: int = 0
    n_judge: int = 0
    requests: int = 0
    t: int = 0  # human labels consumed by the policy
    exhausted: bool = False
    log_e: float = 0.0
    max_log_e: float = 0.0
    path: list = field(default_factory=list)  # per-human-label log e-values (testing policies)
    estimate: float = float("nan")
    ci: tuple | None = None
    decision: int = 0
    rho_weights: list | None = None
    certified_at: int = 0  # human labels when certification was observed (0: never)
    rounds: list = field(default_factory=list)  # per-round rows for tracking

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def apply(self, snap: dict) -> None:
        """Fold an actor snapshot into the record."""
        self.n_human, self.n_judge, self.requests = snap["n_human"], snap["n_judge"], snap["requests"]
        self.t, self.exhausted = snap["t"], bool(snap["exhausted"])
        self.estimate = snap["estimate"]
        if snap.get("ci") is not None:
            self.ci = tuple(snap["ci"])
        if "path" in snap:
            p = np.asarray(snap["path"])
            if p.size:
                self.path.extend(p.tolist())
            self.log_e, self.max_log_e = snap["log_e"], snap["max_log_e"]
            self.rho_weights = snap["rho_weights"]
        if "decision" in snap:
            self.decision = snap["decision"]
        if self.status == "pending":
            self.status = "running"
        if snap.get("error"):  # its label source failed for good: not certified, the others go on
            self.status, self.reason = "failed", f"source failed: {snap['error']}"

    def first_crossing(self, log_level: float) -> int:
        """First human label (1-based) at which log E reached ``log_level``; 0 if never."""
        p = np.asarray(self.path)
        hit = np.flatnonzero(p >= log_level)
        return int(hit[0]) + 1 if hit.size else 0


class Scheduler:
    """Statuses and the next round's candidates for one procedure.

    ``testing``: e-value policies (thresholds on max log E); otherwise estimation policies,
    whose own decision (+1/-1 against alpha at the level they were built with) settles them.
    """

    def __init__(self, records: list[CandidateRecord], *, procedure: str, delta: float, testing: bool,
                 mode: str = "adaptive", lookahead: int = 1, prune_keys=None):
        self.records, self.procedure, self.delta = records, procedure, delta
        self.testing, self.mode, self.lookahead = testing, mode, lookahead
        self.K = len(records)
        # Bonferroni pruning: objective keys (smaller is better); None disables it
        self.prune_keys = None if prune_keys is None else [float(k) for k in prune_keys]

    # -- levels ------------------------------------------------------------------------
    def log_level(self) -> float:
        """The e-value a candidate needs now: 1/delta (FST), K/delta (Bonferroni),
        (K - c)/delta with c certified so far (Holm)."""
        if self.procedure == "fst":
            return math.log(1.0 / self.delta)
        if self.procedure == "bonferroni":
            return math.log(self.K / self.delta)
        c = sum(r.status == "certified" for r in self.records)
        return math.log(max(self.K - c, 1) / self.delta)

    def _settle_one(self, r: CandidateRecord, log_level: float) -> bool:
        if r.finished or r.status == "pending":
            return False
        if self.mode == "full" and self.testing and not r.exhausted:
            return False  # the baseline: every candidate spends its whole budget
        if self.testing:
            if r.max_log_e >= log_level:
                r.status, r.certified_at = "certified", r.first_crossing(log_level)
                return True
        elif r.decision == -1:
            r.status, r.certified_at = "certified", r.t
            return True
        elif r.decision == 1:
            r.status, r.reason = "failed", "risk above alpha certified"
            return True
        if r.exhausted:
            r.status, r.reason = "failed", "budget spent"
            return True
        return False

    def settle(self) -> None:
        """Update statuses after a round (Holm: until no new certification loosens the level)."""
        changed = True
        while changed:
            lvl = self.log_level()
            changed = any([self._settle_one(r, lvl) for r in self.records])
            if self.procedure != "holm":
                break
        if self.prune_keys is not None and self.mode == "adaptive":
            best = min((self.prune_keys[k] for k, r in enumerate(self.records) if r.status == "certified"),
                       default=math.inf)
            for k, r in enumerate(self.records):
                if r.status in ("pending", "running") and self.prune_keys[k] >= best:
                    r.status = "stopped" if r.status == "running" else "skipped"
                    r.reason = "cannot improve the selection"
        if self.procedure == "fst" and self.mode == "adaptive":
            failed = [k for k, r in enumerate(self.records) if r.status == "failed"]
            if failed:
                for r in self.records[failed[0] + 1 :]:
                    if r.status == "pending":
                        r.status, r.reason = "skipped", f"after {self.records[failed[0]].name} failed"
                    elif r.status == "running":
                        r.status, r.reason = "stopped", f"after {self.records[failed[0]].name} failed"

    def active(self) -> list[CandidateRecord]:
        """The candidates to advance in the next round."""
        open_ = [r for r in self.records if not r.finished]
        if self.procedure == "fst" and self.mode == "adaptive":
            return open_[: 1 + self.lookahead]
        return open_

    def stop_all(self, reason: str) -> None:
        for r in self.records:
            if r.status == "running":
                r.status, r.reason = "stopped", reason
            elif r.status == "pending":
                r.status, r.reason = "skipped", reason
