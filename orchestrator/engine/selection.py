"""The rounds of a selection job: which candidates to advance, how far, when each is settled.

Each round asks the hosts of the candidates the job's session schedules (:class:`~.session.SelectionSession`, pure
bookkeeping over :class:`CandidateRecord` objects) to advance them by about as many human labels as their evidence says they still need
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

from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, totals

from .session import SelectionSession, recent_growth


def objective_key(cfg: RunConfig, data) -> np.ndarray | None:
    """The objective as "smaller is better" (None without one)."""
    obj = data.objective
    if obj is None:
        return None
    return -obj if cfg.objective is not None and cfg.objective.goal == "maximize" else obj


def session_of(plan, records: list[CandidateRecord]) -> SelectionSession:
    """The selection session of ``plan``'s job over ``records``."""
    cfg = plan.cfg
    return SelectionSession(records, procedure=plan.procedure, delta=cfg.delta, alpha=cfg.alpha, testing=plan.testing,
                            mode=cfg.scheduling.mode, lookahead=cfg.scheduling.lookahead,
                            key=objective_key(cfg, plan.data), prune=cfg.scheduling.prune,
                            futility=cfg.scheduling.futility, budget=cfg.budget.n,
                            budget_stop=cfg.scheduling.budget_stop)


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


class SelectionRounds:
    """The rounds of a selection job (FST, Bonferroni, Holm, or any registered procedure), driven by
    :func:`~certsel.orchestrator.engine.driver.run_rounds`: each round's snapshots go to the job's
    :class:`~.session.SelectionSession`, which decides."""

    kind = "select"

    def __init__(self, plan, pool, records: list[CandidateRecord]):
        self.plan, self.pool, self.records = plan, pool, records
        self.session = session_of(plan, records)
        self.cost_per_label = (1 + plan.r) * (2 if plan.uses_judge else 1) if plan.testing else 1
        if any(r.claim is not None for r in records):  # continued claims: a claim decided before is settled before any label
            self.session.settle()

    def restore(self, saved: dict) -> Resume:
        """The candidates rebuilt on their hosts from snapshot + log (the records are loaded)."""
        return self.pool.restore_all(int(saved["round"]))

    def state(self) -> dict:
        return {}  # the records are the whole state: the policies live in the hosts

    def advance(self) -> list[CandidateRecord] | None:
        cfg, plan, session = self.plan.cfg, self.plan, self.session
        active = session.active()
        if not active:
            return None
        # those whose model servers fit on the cluster now (live.serve); the rest wait a round
        active = self.pool.schedule.admit(active, [r for r in self.records if not r.finished])
        batch = cfg.budget.batch
        if cfg.budget.max_requests is not None:
            left = cfg.budget.max_requests - totals(self.records)["requests"]
            batch = min(batch, left // (self.cost_per_label * len(active)))
            if batch < 1:
                session.stop_all("request budget spent")
                return None
        sizes = round_sizes(active, session.log_thresholds(), batch, cfg.budget.smallest_round) \
            if plan.testing and cfg.scheduling.rounds == "predicted" else {r.name: batch for r in active}
        by_name = self.pool.step(sizes)
        # a candidate whose host was lost too often is already marked: it has no snapshot
        moved = session.fold({r.name: by_name[r.name].in_units(plan.data.unit) for r in active if r.name in by_name})
        open_before = {r.name for r in self.records if not r.finished}
        session.settle()
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
        """The session's end: the procedure on the final evidence, the bounds, and the selection by objective."""
        plan = self.plan
        if plan.waiter is not None:  # every queue, once more: late answers recorded, the rest withdrawn
            self.withdraw(self.records)
        end = self.session.finish(self.pool if plan.cfg.tracking.intervals != "none" else None, plan.data.unit)
        return self.session.result(end, plan.cfg, plan.data, rounds=rounds, full=plan.full_budget())
