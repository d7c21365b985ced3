"""One selection's decisions as a session (Ray Tune's ``TrialScheduler`` shape): it is fed each candidate's evidence as
it arrives, answers with the decisions as values, and :meth:`SelectionSession.finish` returns the job's result, the
final set, the bounds and the selection included.

The Ray driver's rounds (:class:`~.selection.SelectionRounds`) and ``certsel.inspect``'s
:class:`~certsel.inspect.CertifiedSelection` both feed a session the same :class:`~certsel.workers.contracts.Snapshot`
objects; neither builds records, selections or joint bounds of its own. The decisions are the decision core's
(:mod:`.decisions`, pure functions over frozen evidence); the session only keeps the records they apply to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from certsel.policies.budget_stop import DEFAULT_LEVEL, Growth
from certsel.policies.procedures import CandidateView, Procedure
from certsel.workers.contracts import Snapshot

from certsel.orchestrator.results.records import CandidateRecord, JobResult, Status, totals

from . import decisions
from .decisions import Certify, Decision, Evidence, Rules, log_thresholds, settle


@dataclass(frozen=True)
class SessionEnd:
    """What a session decided at its end: the final set (a mask in the job's order), the selected candidate and the
    procedure's levels in words."""

    certified: np.ndarray
    selected: str | None
    level: str


class FinalBounds(Protocol):
    """Where a session's candidates' final bounds come from: the hosts' policies (``HostPool``) or inspect's tasks.
    ``levels[name]``: the levels of the one-sided bounds asked for that candidate."""

    def finalize(self, names: list[str], levels: dict[str, list[float]],
                 stop: dict[str, float] | None = None) -> dict[str, Snapshot]: ...


def new_records(names, objective=None, true_risk=None) -> list[CandidateRecord]:
    """A record per candidate, in the job's order (``objective``, ``true_risk``: arrays, or None)."""
    return [CandidateRecord(nm, k, None if objective is None else float(objective[k]),
                            None if true_risk is None else float(true_risk[k])) for k, nm in enumerate(names)]


def evidence(records: list[CandidateRecord], budget: int | None = None) -> tuple[Evidence, ...]:
    """The frozen evidence the decision core decides on (it changes no record): a testing record whose every item is
    known (``exact``, its ``decision`` -1 where the exact mean passes) has the evidence +inf or -inf (exact p-value 0
    or 1). With the candidates' human-label ``budget``, each record's recent growth and the labels it has left (the
    budget stop's inputs)."""
    def growth(path):
        return None if budget is None or not path else Growth.of(path)

    return tuple(Evidence(r.name, r.status, r.t, r.max_log_e if not r.exact else
                          (math.inf if r.decision == -1 else -math.inf), r.exhausted, r.max_log_futility, r.decision,
                          r.log_e, growth(r.path), None if budget is None else max(budget - r.t, 0),
                          r.futility_path[-1] if r.futility_path else 0.0, growth(r.futility_path))
                 for r in records)


def views(records: list[CandidateRecord]) -> tuple[CandidateView, ...]:
    """The frozen views the procedure's hooks decide on (they change no record)."""
    return decisions.views([r.status for r in records], [r.name for r in records])


def apply(records: list[CandidateRecord], decided) -> None:
    """The decision core's decisions (:mod:`.decisions`) applied to the records, in order."""
    for d in decided:
        r = records[d.index]
        if isinstance(d, Certify):
            r.status = Status.CERTIFIED
            r.certified_at = r.t if d.log_level is None else r.first_crossing(d.log_level)
            if d.reason:
                r.reason = d.reason
        else:
            r.end(d.status, d.reason)


class SelectionSession:
    """The records of one selection and the decisions on them. ``testing``: e-value policies (thresholds on max log E
    from the procedure); otherwise estimation policies, settled by their own decision (+1/-1 against alpha at their
    level). ``key``: the objective as "smaller is better" (None: none); ``prune``: stop candidates that cannot improve
    the selection. ``mode`` "full" is the full-budget baseline (nothing stops early)."""

    def __init__(self, records: list[CandidateRecord], *, procedure: Procedure, delta: float, alpha: float = 0.1,
                 testing: bool = True, mode: str = "adaptive", lookahead: int = 1, key=None, prune: bool = False,
                 futility: float | None = None, budget: int | None = None, budget_stop: float | None = None):
        self.records, self.delta, self.alpha = records, delta, alpha
        # each testing candidate's human-label budget: look-ahead is spent only on a frontier that can meet it
        self.budget = budget
        self.procedure = procedure
        self.testing, self.mode, self.lookahead = testing, mode, lookahead
        self.key = None if key is None else np.asarray(key, dtype=np.float64)
        self.K = len(records)
        self.by_name = {r.name: r for r in records}  # the records never change: looked up on every snapshot
        self.rules = Rules(procedure, delta, testing=testing, adaptive=mode == "adaptive", futility=futility,
                           prune_keys=tuple(float(k) for k in self.key) if prune and self.key is not None else None,
                           budget_stop=budget_stop)

    # -- levels ------------------------------------------------------------------------
    def log_thresholds(self) -> np.ndarray:
        """The log e-value each candidate needs now, from the procedure and the evidence so far."""
        certified = np.array([r.status is Status.CERTIFIED for r in self.records], dtype=bool)
        return log_thresholds(self.rules, certified)

    def log_level(self) -> float:
        """The strictest e-value threshold now (what the reports draw)."""
        return float(np.max(self.log_thresholds()))

    # -- evidence in, decisions out -------------------------------------------------------
    def feed(self, snapshots: Mapping[str, Snapshot]) -> list[Decision]:
        """Each candidate's new evidence folded into its record (:meth:`fold`), then the decisions (:meth:`settle`)."""
        self.fold(snapshots)
        return self.settle()

    def fold(self, snapshots: Mapping[str, Snapshot]) -> list[CandidateRecord]:
        """Fold each candidate's new evidence into its record; the records that took a step (one that only waited
        for people is no step)."""
        by_name, moved = self.by_name, []
        for name, snap in snapshots.items():
            r = by_name[name]
            before = r.t
            r.apply(snap)
            if r.t > before or not r.waiting:
                r.rounds.append(r.round_row())
                moved.append(r)
        return moved

    def settle(self) -> list[Decision]:
        """The decision core's decisions on the evidence now (:func:`~.decisions.settle`), applied and returned."""
        out = settle(evidence(self.records, self.budget if self.rules.budget_stop is not None else None), self.rules)
        apply(self.records, out)
        return out

    def active(self) -> list[CandidateRecord]:
        """The candidates to advance next. Look-ahead (the candidates a fixed sequence would test after the first
        unsettled one) is spent only while that one is :meth:`on_track`: a candidate after a failure can never be
        certified, so labels bought for it while its predecessor heads for failure are lost. Which candidates run when
        never changes a decision, only what the job spends and how many rounds it takes."""
        open_ = [r for r in self.records if not r.finished]
        if self.mode == "adaptive":
            lookahead = self.lookahead if not open_ or self.on_track(open_[0]) else 0
            chosen = {v.name for v in self.procedure.active(views(open_), lookahead)}
            return [r for r in open_ if r.name in chosen]
        return open_

    def on_track(self, r: CandidateRecord) -> bool:
        """Whether ``r``'s evidence, growing at its recent rate (:func:`recent_growth`), reaches its threshold within
        its budget; true before its first label and for estimation policies, whose evidence is not a log e-value."""
        if not self.testing or self.budget is None or r.t == 0:
            return True
        need = float(self.log_thresholds()[r.index]) - r.log_e
        growth = recent_growth(r.path)
        return need <= 0 or (growth > 0 and need / growth <= self.budget - r.t)

    def stop_all(self, reason: str) -> None:
        for r in self.records:
            if r.status.running:
                r.end(Status.STOPPED, reason)
            elif r.status.waiting:
                r.end(Status.SKIPPED, reason)

    # -- the end ------------------------------------------------------------------------------
    def final_rules(self) -> Rules:
        """The rules the final decisions are taken by (no early stop)."""
        return Rules(self.procedure, self.delta, testing=self.testing)

    def final_set(self) -> np.ndarray:
        """The procedure applied to the evidence now (for e-values: the running maxima)."""
        return decisions.final_certified(evidence(self.records), self.final_rules())

    def decision_levels(self) -> np.ndarray:
        return decisions.decision_levels(evidence(self.records), self.final_rules())

    def joint(self, own_at) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """On the evidence now, without changing a record: the certified set, each candidate's decision level and the
        simultaneous risk bounds (NaN: no statement), from ``own_at(index, level)``, a candidate's own bound at a
        level."""
        rules, certified = self.final_rules(), self.final_set()
        joint_levels = decisions.bound_levels(rules, certified)
        own = np.array([np.nan if np.isnan(lv) else own_at(k, float(lv)) for k, lv in enumerate(joint_levels)])
        return certified, self.decision_levels(), decisions.joint_bounds(rules, self.alpha, certified, own)

    def stop_request(self, certified: np.ndarray) -> dict[str, float] | None:
        """{name: gamma} of the first candidate a fixed sequence tested and did not certify, whose labels to end it
        the oracle counts (:func:`~certsel.policies.limits.stop_limit`; gamma: the budget stop's level, or its default
        where the job has none); None for other procedures, whose oracle counts the certified only."""
        if not self.procedure.needs_order:
            return None
        first = next((r for r in self.records if r.t > 0 and not certified[r.index]), None)
        gamma = self.rules.budget_stop if self.rules.budget_stop is not None else DEFAULT_LEVEL
        return None if first is None else {first.name: gamma}

    def final_bounds(self, bounds: FinalBounds | None, certified: np.ndarray, unit: float = 1.0) -> None:
        """Each candidate's own one-sided bound at the level of its decision and the bounds that hold together for all
        candidates (:meth:`Procedure.simultaneous_bounds`): a testing candidate's ``bounds`` give both levels; an
        estimation candidate's own bound (at its policy's level) is already in its record. ``bounds`` None (no
        intervals asked): only the procedure's family-wise statement remains, alpha for the certified."""
        rules, records, K = self.final_rules(), self.records, self.K
        joint_levels = decisions.bound_levels(rules, certified)
        own = np.full(K, np.nan)
        if self.testing and bounds is not None:
            levels = self.decision_levels()
            ran = [r for r in records if r.t > 0]
            asked = {r.name: [float(levels[r.index])] + ([] if np.isnan(joint_levels[r.index])
                                                         else [float(joint_levels[r.index])]) for r in ran}
            finals = bounds.finalize([r.name for r in ran], asked, self.stop_request(certified))
            for r in records:
                if r.t == 0:  # never labelled: the trivial bound
                    own[r.index] = 1.0
                    continue
                snap = finals[r.name].in_units(unit)
                r.ci = None if snap.ci is None else tuple(snap.ci)
                r.judge, r.label_minimum, r.stop_minimum = snap.judge, snap.label_minimum, snap.stop_minimum
                r.upper_bound = snap.level_bounds[float(levels[r.index])]
                if not np.isnan(joint_levels[r.index]):
                    own[r.index] = snap.level_bounds[float(joint_levels[r.index])]
        elif not self.testing:
            deltas = self.procedure.candidate_deltas(self.delta, K)
            for r in records:  # a policy's bound is at its own level only
                if joint_levels[r.index] == deltas[r.index]:
                    own[r.index] = 1.0 if r.upper_bound is None else r.upper_bound
        joint = decisions.joint_bounds(rules, self.alpha, certified, own)
        for r in records:
            r.joint_bound = None if np.isnan(joint[r.index]) else float(joint[r.index])

    def selection(self, certified: np.ndarray) -> int:
        """The selected candidate's index (-1: none): the certified one with the best objective; without one, the end
        of a fixed sequence's certified prefix, else the smallest simultaneous bound, ties (Holm's certified set all
        share alpha) to the smallest upper bound of its own test."""
        key = self.key
        if key is None and not self.procedure.needs_order:
            joint = np.array([np.inf if r.joint_bound is None else r.joint_bound for r in self.records])
            own = np.array([np.inf if r.upper_bound is None else r.upper_bound for r in self.records])
            key = np.empty(joint.size)
            key[np.lexsort((own, joint))] = np.arange(joint.size)  # rank by joint bound, then own bound
        return self.procedure.selection(certified, key)

    def finish(self, bounds: FinalBounds | None, unit: float = 1.0) -> SessionEnd:
        """The procedure on the final evidence, the bounds, statuses that agree with the final set, and the
        selection (``unit``: what the policies' losses are in the job's units, an aggregate's M)."""
        records = self.records
        certified = self.final_set()
        self.final_bounds(bounds, certified, unit)
        apply(records, decisions.reconcile(evidence(records), self.final_rules(), certified))
        for r in records:  # decided on the exact mean of every item: its e-value never crossed a level
            if r.exact and r.status is Status.CERTIFIED and not r.certified_at:
                r.certified_at = r.t
        sel = self.selection(certified)
        return SessionEnd(certified, records[sel].name if sel >= 0 else None, self.procedure.level(self.delta, self.K))

    def result(self, end: SessionEnd, cfg, data, *, rounds: int, full: dict) -> JobResult:
        """The job's result from its session's end (``cfg``, ``data``: the job's; ``full``: the label counts of its
        full budget)."""
        return JobResult(cfg, data, self.records, [self.records[k].name for k in np.flatnonzero(end.certified)],
                         end.selected, end.level, totals(self.records), full, rounds)


def recent_growth(path) -> float:
    """log E gained per label over the later half of the path: a mixture's evidence grows faster once its weights have
    concentrated, so the early labels under-state the rate (:class:`~certsel.policies.budget_stop.Growth`)."""
    return Growth.of(path).rate
