"""The rounds of a selection job: which candidates to advance, how far, when each is settled.

Each round asks the hosts of the candidates the procedure schedules (:class:`Scheduler`, pure bookkeeping over
:class:`CandidateRecord` objects) to advance them by about as many human labels as their evidence says they still need
(:func:`round_sizes`, at most ``budget.batch``), folds the snapshots into the records and settles statuses. At the end
the procedure is applied to the final evidence, each candidate's bounds are computed at the level of its decision and
the selection is made by objective (:meth:`SelectionRounds.result`).

Why stopping early keeps every guarantee: a candidate is certified when the running maximum of its e-process (or the end
of its confidence sequence) crosses the level; that event is contained in "the e-process *ever* crosses the level within
the budget", whose probability under the null Ville's inequality bounds by the level, whatever rule decided when to stop
or how far to run. So the schedule may depend on every candidate's data (e.g. FST's frontier), and:

* **FST**: the certified set is the longest certified prefix of the order. Labels go to the frontier (the first
  candidate not yet certified) and ``lookahead`` candidates after it; once a candidate has spent its budget uncertified,
  no later candidate can join the prefix, so they are stopped (or never started). The certified set equals the
  full-budget one.
* **Bonferroni**: each candidate runs at level delta/K and stops once certified (or out of budget); the certified set
  equals the full-budget one. With ``prune``, candidates whose objective is no better than a certified one's stop too:
  the selection (the best certified objective) is still the full-budget one, the certified set a subset.
* **Holm**: with c candidates certified, the next one needs E >= (K - c)/delta. A candidate stopped at that level is in
  Holm's final set, and Holm applied to the final running maxima returns exactly the full-budget Holm set (the argument:
  ``docs/driver.md``; the tests check it against the full-budget computation).
"""

from __future__ import annotations


import numpy as np

from certsel.config import RunConfig
from certsel.policies.procedures import CandidateView, Procedure

from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, Status, totals

from . import decisions
from .decisions import Certify, Evidence, Rules, log_thresholds, settle


def evidence(records: list[CandidateRecord]) -> tuple[Evidence, ...]:
    """The frozen evidence the decision core decides on (it changes no record)."""
    return tuple(Evidence(r.name, r.status, r.t, r.max_log_e, r.exhausted, r.max_log_futility, r.decision)
                 for r in records)


def views(records: list[CandidateRecord]) -> tuple[CandidateView, ...]:
    """The frozen views the procedure's hooks decide on (they change no record)."""
    return decisions.views([r.status for r in records], [r.name for r in records])


def apply(records: list[CandidateRecord], decisions) -> None:
    """The decision core's decisions (:mod:`.decisions`) applied to the records, in order."""
    for d in decisions:
        r = records[d.index]
        if isinstance(d, Certify):
            r.status = Status.CERTIFIED
            r.certified_at = r.t if d.log_level is None else r.first_crossing(d.log_level)
            if d.reason:
                r.reason = d.reason
        else:
            r.end(d.status, d.reason)


class Scheduler:
    """Statuses and the next round's candidates for one procedure: :func:`~.decisions.settle` applied to the records
    after every round. ``testing``: e-value policies (thresholds on max log E from the procedure); otherwise estimation
    policies, settled by their own decision (+1/-1 against alpha at their level)."""

    def __init__(self, records: list[CandidateRecord], *, procedure: Procedure, delta: float, testing: bool,
                 mode: str = "adaptive", lookahead: int = 1, prune_keys=None, futility: float | None = None,
                 budget: int | None = None):
        self.records, self.delta = records, delta
        # each testing candidate's human-label budget: look-ahead is spent only on a frontier that can meet it
        self.budget = budget
        self.procedure = procedure
        self.testing, self.mode, self.lookahead = testing, mode, lookahead
        self.K = len(records)
        self.rules = Rules(procedure, delta, testing=testing, adaptive=mode == "adaptive", futility=futility,
                           prune_keys=None if prune_keys is None else tuple(float(k) for k in prune_keys))

    # -- levels ------------------------------------------------------------------------
    def log_thresholds(self) -> np.ndarray:
        """The log e-value each candidate needs now, from the procedure and the evidence so far."""
        certified = np.array([r.status is Status.CERTIFIED for r in self.records], dtype=bool)
        return log_thresholds(self.rules, certified)

    def log_level(self) -> float:
        """The strictest e-value threshold now (what the reports draw)."""
        return float(np.max(self.log_thresholds()))

    def settle(self) -> None:
        """Update statuses after a round (:func:`~.decisions.settle`)."""
        apply(self.records, settle(evidence(self.records), self.rules))

    def active(self) -> list[CandidateRecord]:
        """The candidates to advance in the next round. Look-ahead (the candidates a fixed sequence would test after the
        first unsettled one) is spent only while that one is :meth:`on_track`: a candidate after a failure can never be
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


def objective_key(cfg: RunConfig, data) -> np.ndarray | None:
    """The objective as "smaller is better" (None without one)."""
    obj = data.objective
    if obj is None:
        return None
    return -obj if cfg.objective is not None and cfg.objective.goal == "maximize" else obj


def final_certified(plan, records) -> np.ndarray:
    """The procedure applied to the final evidence (for e-values: the running maxima)."""
    return decisions.final_certified(evidence(records), rules_of(plan))


def reconcile(plan, records, certified_mask) -> None:
    """Statuses that agree with the final set (:func:`~.decisions.reconcile`)."""
    apply(records, decisions.reconcile(evidence(records), rules_of(plan), certified_mask))


def rules_of(plan) -> Rules:
    """The rules the final decisions of ``plan``'s job are taken by."""
    return Rules(plan.procedure, plan.cfg.delta, testing=plan.testing)


def final_bounds(plan, pool, records, certified_mask) -> None:
    """Each candidate's own one-sided bound at the level of its decision and the bounds that hold together for all
    candidates (:meth:`Procedure.simultaneous_bounds`): a testing candidate's host computes its bounds at both levels;
    an estimation candidate's own bound (at its policy's level) is already in its record. With ``tracking.intervals:
    none`` only the procedure's family-wise statement remains: alpha for the certified."""
    cfg, proc, rules = plan.cfg, plan.procedure, rules_of(plan)
    K = len(records)
    joint_levels = decisions.bound_levels(rules, certified_mask)
    own = np.full(K, np.nan)
    if plan.testing and cfg.tracking.intervals != "none":
        levels = decisions.decision_levels(evidence(records), rules)
        ran = [r for r in records if r.t > 0]
        asked = {r.name: [float(levels[r.index])] + ([] if np.isnan(joint_levels[r.index])
                                                     else [float(joint_levels[r.index])]) for r in ran}
        finals = pool.finalize([r.name for r in ran], asked)
        for r in records:
            if r.t == 0:  # never labelled: the trivial bound
                own[r.index] = 1.0
                continue
            snap = finals[r.name].in_units(plan.data.unit)
            r.ci, r.judge, r.label_minimum = tuple(snap.ci), snap.judge, snap.label_minimum
            r.upper_bound = snap.level_bounds[float(levels[r.index])]
            if not np.isnan(joint_levels[r.index]):
                own[r.index] = snap.level_bounds[float(joint_levels[r.index])]
    elif not plan.testing:
        deltas = proc.candidate_deltas(cfg.delta, K)
        for r in records:  # a policy's bound is at its own level only
            if joint_levels[r.index] == deltas[r.index]:
                own[r.index] = 1.0 if r.upper_bound is None else r.upper_bound
    joint = decisions.joint_bounds(rules, cfg.alpha, certified_mask, own)
    for r in records:
        r.joint_bound = None if np.isnan(joint[r.index]) else float(joint[r.index])


def round_sizes(active, log_thresholds, batch: int, smallest: int) -> dict:
    """The next round's labels per candidate: about what its evidence says it still needs, (threshold - log E) / g with
    a 25% margin, g the growth of log E per label over the later half of its path (:func:`recent_growth`), between
    ``smallest`` and ``batch`` (``batch`` before any growth). Sizing rounds from the path keeps the certificate: the
    e-process is valid at any stopping time (docs/statistics.md)."""
    out = {}
    for r in active:
        growth = recent_growth(r.path)
        if growth <= 0:
            out[r.name] = batch
            continue
        need = (float(log_thresholds[r.index]) - r.log_e) / growth
        out[r.name] = int(np.clip(np.ceil(1.25 * need), min(smallest, batch), batch))
    return out


def recent_growth(path) -> float:
    """log E gained per label over the later half of the path: a mixture's evidence grows faster once its weights have
    concentrated, so the early labels under-state the rate."""
    t = len(path)
    if t == 0:
        return 0.0
    half = t // 2
    return (path[-1] - (path[half - 1] if half else 0.0)) / (t - half)


class SelectionRounds:
    """The rounds of a selection job (FST, Bonferroni, Holm, or any registered procedure), driven by
    :func:`~certsel.orchestrator.engine.driver.run_rounds`."""

    kind = "select"

    def __init__(self, plan, pool, records: list[CandidateRecord]):
        self.plan, self.pool, self.records = plan, pool, records
        cfg = plan.cfg
        self.key = objective_key(cfg, plan.data)
        self.sched = Scheduler(records, procedure=plan.procedure, delta=cfg.delta, testing=plan.testing,
                               mode=cfg.scheduling.mode, lookahead=cfg.scheduling.lookahead,
                               prune_keys=self.key if cfg.scheduling.prune else None,
                               futility=cfg.scheduling.futility, budget=cfg.budget.n)
        self.cost_per_label = (1 + plan.r) * (2 if plan.uses_judge else 1) if plan.testing else 1
        if any(r.claim is not None for r in records):  # continued claims: a claim decided before is settled before any label
            self.sched.settle()

    def restore(self, saved: dict) -> Resume:
        """The candidates rebuilt on their hosts from snapshot + log (the records are loaded)."""
        return self.pool.restore_all(int(saved["round"]))

    def state(self) -> dict:
        return {}  # the records are the whole state: the policies live in the hosts

    def advance(self) -> list[CandidateRecord] | None:
        cfg, plan, sched = self.plan.cfg, self.plan, self.sched
        active = sched.active()
        if not active:
            return None
        # those whose model servers fit on the cluster now (live.serve); the rest wait a round
        active = self.pool.schedule.admit(active, [r for r in self.records if not r.finished])
        batch = cfg.budget.batch
        if cfg.budget.max_requests is not None:
            left = cfg.budget.max_requests - totals(self.records)["requests"]
            batch = min(batch, left // (self.cost_per_label * len(active)))
            if batch < 1:
                sched.stop_all("request budget spent")
                return None
        sizes = round_sizes(active, sched.log_thresholds(), batch, cfg.budget.smallest_round) \
            if plan.testing and cfg.scheduling.rounds == "predicted" else {r.name: batch for r in active}
        by_name = self.pool.step(sizes)
        moved = []
        for r in active:
            if r.name not in by_name:
                continue  # its host was lost too often: already marked
            before = r.t
            r.apply(by_name[r.name].in_units(plan.data.unit))
            if r.t > before or not r.waiting:  # a round that only waited for people is no step
                r.rounds.append(r.round_row())
                moved.append(r)
        open_before = {r.name for r in self.records if not r.finished}
        sched.settle()
        if plan.waiter is not None:
            self.withdraw([r for r in self.records if r.finished and r.name in open_before])
            if not moved and any(r.waiting for r in active):
                plan.waiter.wait()  # every candidate waits for people: look again later (or when told)
        return moved

    def withdraw(self, records: list[CandidateRecord]) -> None:
        """Settled candidates' annotation queues take back the tasks nobody started."""
        if records:
            by_name = {r.name: r for r in records}
            for name, report in self.pool.withdraw(list(by_name)).items():
                by_name[name].queue = report

    def result(self, rounds: int) -> JobResult:
        """The procedure on the final evidence, the bounds, and the selection by objective."""
        plan, records, cfg, names = self.plan, self.records, self.plan.cfg, self.plan.data.names
        if plan.waiter is not None:  # every queue, once more: late answers recorded, the rest withdrawn
            self.withdraw(records)
        certified_mask = final_certified(plan, records)
        final_bounds(plan, self.pool, records, certified_mask)
        reconcile(plan, records, certified_mask)
        sel = plan.procedure.selection(certified_mask, self.key)
        return JobResult(cfg, plan.data, records, [records[k].name for k in np.flatnonzero(certified_mask)],
                         names[sel] if sel >= 0 else None, plan.procedure.level(cfg.delta, len(records)),
                         totals(records), plan.full_budget(), rounds)
