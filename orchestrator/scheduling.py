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

import numpy as np

from certsel.policies.procedures import Procedure, get_procedure

from .records import CandidateRecord, Status

__all__ = ["CandidateRecord", "Scheduler", "Status"]


class Scheduler:
    """Statuses and the next round's candidates for one procedure.

    ``testing``: e-value policies (thresholds on max log E from the procedure); otherwise
    estimation policies, whose own decision (+1/-1 against alpha at the level they were
    built with) settles them.
    """

    def __init__(self, records: list[CandidateRecord], *, procedure: str | Procedure, delta: float, testing: bool,
                 mode: str = "adaptive", lookahead: int = 1, prune_keys=None, futility: float | None = None):
        self.records, self.delta = records, delta
        self.procedure = get_procedure(procedure) if isinstance(procedure, str) else procedure
        self.testing, self.mode, self.lookahead = testing, mode, lookahead
        self.K = len(records)
        # futility level delta_f of testing candidates (None: off); its stops never certify anything
        self.futility_level = None if futility is None or not testing else math.log(1.0 / futility)
        # pruning (procedures that allow it): objective keys, smaller is better; None disables it
        self.prune_keys = None if prune_keys is None else [float(k) for k in prune_keys]

    # -- levels ------------------------------------------------------------------------
    def log_thresholds(self) -> np.ndarray:
        """The log e-value each candidate needs now, from the procedure and the evidence so far."""
        certified = np.array([r.status is Status.CERTIFIED for r in self.records], dtype=bool)
        return self.procedure.log_thresholds(self.delta, certified)

    def log_level(self) -> float:
        """The strictest e-value threshold now (what the reports draw)."""
        return float(np.max(self.log_thresholds()))

    def _certify(self, r: CandidateRecord, log_level: float) -> bool:
        """Certify ``r`` if its evidence passes its threshold now."""
        if r.finished or r.status is Status.PENDING:
            return False
        if self.mode == "full" and self.testing and not r.exhausted:
            return False  # the baseline: every candidate spends its whole budget
        if self.testing and r.max_log_e >= log_level:
            r.status, r.certified_at = Status.CERTIFIED, r.first_crossing(log_level)
            return True
        if not self.testing and r.decision == -1:
            r.status, r.certified_at = Status.CERTIFIED, r.t
            return True
        return False

    def _end(self, r: CandidateRecord) -> None:
        """End ``r`` if it cannot be certified any more: R >= alpha certified, or its budget spent."""
        if r.finished or r.status is Status.PENDING:
            return
        if not self.testing and r.decision == 1:
            r.end(Status.ABOVE_ALPHA, "risk above alpha certified")
        elif self.futility_level is not None and self.mode == "adaptive" and r.max_log_futility >= self.futility_level:
            r.end(Status.FUTILE, f"R >= alpha certified at the futility level after {r.t} human labels")
        elif r.exhausted:
            r.end(Status.NOT_CERTIFIED, "budget spent")

    def settle(self) -> None:
        """Update statuses after a round. Certifications come first, until none changes a
        threshold (Holm: each one loosens the others'); only then do candidates whose
        budget is spent end uncertified, at the thresholds the round reached."""
        changed = True
        while changed:
            thresholds = self.log_thresholds()
            changed = any([self._certify(r, float(thresholds[r.index])) for r in self.records])
        for r in self.records:
            self._end(r)
        if self.prune_keys is not None and self.mode == "adaptive":
            best = min((self.prune_keys[k] for k, r in enumerate(self.records) if r.status is Status.CERTIFIED),
                       default=math.inf)
            for k, r in enumerate(self.records):
                if not r.finished and self.prune_keys[k] >= best:
                    r.end(Status.STOPPED if r.status.running else Status.SKIPPED, "cannot improve the selection")
        if self.mode == "adaptive":
            self.procedure.after_settle(self.records)

    def active(self) -> list[CandidateRecord]:
        """The candidates to advance in the next round."""
        open_ = [r for r in self.records if not r.finished]
        if self.mode == "adaptive":
            return self.procedure.active(open_, self.lookahead)
        return open_

    def stop_all(self, reason: str) -> None:
        for r in self.records:
            if r.status.running:
                r.end(Status.STOPPED, reason)
            elif r.status.waiting:
                r.end(Status.SKIPPED, reason)
