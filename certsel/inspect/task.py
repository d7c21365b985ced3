"""One inspect-ai task under a certsel test: the early-stopping protocol inspect calls
(``start_task``, ``schedule_sample``, ``complete_sample``, ``complete_task``), the task's test of
"mean score >= T" and its record.

The test is certsel's R-Eval betting test (``certsel.policies.SequentialTest``) on the loss 1 - score against
alpha = 1 - T. By default it is the exact test for the mean over the task's N samples under sampling without
replacement (``policies/sampling.py``): inspect runs the samples in a shuffled order, so those run so far are a
uniformly random subset. With ``sampling="iid"`` it tests the expected score of a sample from the dataset's
distribution.

A task never decides for itself: its selection (:class:`~certsel.inspect.CertifiedSelection`, or the one a
:class:`~certsel.inspect.CertifiedStopping` makes) applies the decision core to every task's evidence after each score.

Concurrency (:mod:`certsel.inspect.schedule`): a stop is a stopping time of the schedule-ordered scores, covered by
Ville's inequality; samples in flight at the stop are fed in schedule order too, which only looks at the same
e-process at a later stopping time. See docs/inspect.md, "What the certificate means".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from certsel.errors import InputError
from certsel.policies import SequentialTest
from certsel.policies.autoeval_bounds import decision_upper_bound
from certsel.policies.kinds import POLICY_KINDS, PolicyInputs, PolicySettings, with_futility
from certsel.policies.betting import get_strategy
from certsel.policies.sampling import SAMPLINGS, IID, WithoutReplacement, sampling_named

from certsel.policies import judge_agreement
from certsel.workers.contracts import Snapshot

from .claims import KIND, TaskClaim, task_identity, test_state
from .judge import NOT_LABELLED, JudgeFeed, gated_scorer
from .setup import SetupError, check_claim, check_samples, checked_level
from .record import SampleCounts, TaskRecord
from .schedule import ScheduleLedger
from .scores import ScoreError, ScoreReader


class StopReason(str, Enum):
    CERTIFIED = "certified"
    FUTILE = "futile"
    BUDGET = "budget"
    NOT_NEEDED = "not needed"
    REFUSED = "refused"


@dataclass
class _Run:
    """One task's run: its samples, the tests and what the manager decided."""

    task: str
    model: str
    size: int
    epochs: int
    reader: ScoreReader
    ledger: ScheduleLedger
    test: SequentialTest
    futility: SequentialTest | None
    horizon: int
    losses: list  # human losses given to the test (1 - score), in schedule order
    path: list = field(default_factory=list)  # the test's log e-value after each label
    judge: "JudgeFeed | None" = None
    stop: StopReason | None = None
    why: str = ""
    decided_at: int = 0  # samples released to the test when the stop was decided
    scheduled_at_stop: int = 0
    skipped: set = field(default_factory=set)  # samples never started
    skipped_runs: int = 0
    budget_hit: bool = False
    done: bool = False
    claim: "TaskClaim | None" = None  # its claim in the ledger (None: the ledger is off)
    earlier: list = field(default_factory=list)  # samples earlier runs of its claim gave the test, in order
    consumed: set = field(default_factory=set)  # their ids: skipped here

    @property
    def scored(self) -> int:
        """Samples the claim's test has seen, earlier runs' included."""
        return len(self.earlier) + self.ledger.released

    @property
    def started(self) -> int:
        """Samples the claim's test has started, earlier runs' included."""
        return len(self.earlier) + self.ledger.scheduled

    def tested_ids(self) -> list:
        """The ids of the samples the test has seen, in its order."""
        return [*self.earlier, *self.ledger.order[: self.ledger.released]]

    def pending(self) -> list:
        """(id, its epoch mean or None) of the samples started but not given to the test, in schedule order."""
        led = self.ledger
        return [(i, float(np.mean(np.stack(list(led.values[i].values())))) if led.done(i) else None)
                for i in led.order[led.released:]]


class TaskTest:
    """One task's early-stopping manager and its test of "mean score >= T", decided by its
    selection (``selection``, its name there ``candidate``).

    Parameters
    ----------
    at_least : T in (0, 1), the mean score to certify; or ``alpha`` = 1 - T (a risk with the loss 1 - score).
    delta : the certificate's error probability.
    scorer, key : the scorer tested (default: the task's first) and, for a dict-valued score, the key. Values go
        through inspect's value-to-float (C/I/P/N, yes/no, numbers in [0, 1]); anything else is refused, never 0.
    betting : ``"up"``, ``"wsr"``, ``"ons"`` or a strategy object.
    futility : delta_f of the futility stop (the mirrored test of "mean score <= T"); None: off.
    budget : the most samples to run (default: all).
    sampling : ``"without-replacement"`` (exact for the task's samples) or ``"iid"``; default: without
        replacement, iid with a judge.
    judge, ratio : R-AutoEval+: ``judge`` names a cheap scorer that scores every sample; ``scorer``, wrapped with
        :meth:`gate`, runs only on one sample in every ``ratio + 1`` in schedule order (Algorithm 1's r).

    Raises :class:`~certsel.errors.InputError` on bad arguments and :class:`SetupError` (at ``start_task``) on a
    task that cannot be certified.
    """

    def __init__(self, at_least: float | None = None, *, alpha: float | None = None, delta: float = 0.05,
                 scorer: str | None = None, key: str | None = None, betting="up", futility: float | None = 0.05,
                 budget: int | None = None, sampling: str | None = None, judge: str | None = None,
                 ratio: int = 3, selection=None, candidate: str | None = None):
        self.selection, self.candidate = selection, candidate
        self.at_least = check_claim(at_least, alpha)
        self.alpha = 1.0 - self.at_least
        self.delta = checked_level(delta, "delta")
        self.futility = None if futility is None else checked_level(futility, "futility")
        try:
            self.strategy = get_strategy(betting)
        except ValueError as err:
            raise InputError(str(err)) from None
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise InputError(f"budget must be a positive number of samples, got {budget!r}")
        self.budget = budget
        if sampling is None:
            sampling = IID.name if judge is not None else WithoutReplacement.name
        if sampling not in SAMPLINGS:
            raise InputError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
        self.sampling = sampling
        if judge is not None and self.sampling != IID.name:
            # the finite-table form needs the judge-only items in an order of their own (docs/statistics.md),
            # not one shuffled order split into labelled and judge-only samples
            raise InputError("judge-assisted testing is the i.i.d. test: leave sampling unset or pass sampling='iid'")
        if isinstance(ratio, bool) or not isinstance(ratio, int) or ratio < 1:
            raise InputError(f"ratio must be a positive number of judge-only samples per label, got {ratio!r}")
        self.judge_reader = None if judge is None else ScoreReader(judge)
        self.ratio = ratio
        self.gated: set = set()  # names of the scorers made by gate()
        self.reader = ScoreReader(scorer, key)
        self.run: _Run | None = None
        self.certificate: TaskRecord | None = None

    # -- what the selection decides for it ------------------------------------------------------------
    @property
    def index(self) -> int:
        return self.selection.names.index(self.candidate)

    def snapshot(self, path=(), error: str | None = None) -> Snapshot:
        """Its evidence now, as a job's candidate reports it to the selection's session: ``path``, the test's log
        e-values since the last one; once every sample was scored without
        replacement, whether the exact mean passed (the session's evidence is then +inf / -inf); out of budget once the task ran all
        its samples. ``error``: its scores were refused."""
        run = self.run
        exact = self.exact_pass()
        n = len(run.losses)
        judged = 0 if run.judge is None else int(run.judge.summary()["judge_only"])
        return Snapshot(self.candidate, n_human=n, n_judge=judged, requests=n + judged, t=n,
                        exhausted=run.done or exact is not None,
                        estimate=float(run.test.estimate) if n else float("nan"),
                        futility_log_e=None if run.futility is None else float(run.futility.max_log_evalue),
                        path=np.asarray(path, dtype=np.float64), log_e=run.path[-1] if run.path else 0.0,
                        max_log_e=float(run.test.max_log_evalue), error=error, exact=exact is not None,
                        decision=None if exact is None else (-1 if exact else 1))

    def final_snapshot(self, levels) -> Snapshot:
        """Its one-sided risk bounds at ``levels`` (1 - the lower bounds on the mean score) and the judge's agreement
        with the labels: what a session's end asks of a candidate."""
        agreement = None
        if self.run.judge is not None:
            h, jl, _ = self.run.judge.all()
            agreement = judge_agreement(1.0 - h, 1.0 - jl)
        return Snapshot(self.candidate, level_bounds={lv: 1.0 - self.lower_bound(lv) for lv in levels},
                        judge=agreement)

    # -- inspect's EarlyStopping protocol --------------------------------------------------------
    def refuse_second_task(self) -> None:
        if self.run is not None and not self.run.done:
            raise SetupError(f"this CertifiedStopping is already running task {self.run.task!r} "
                             f"({self.run.model}); give every task its own (CertifiedSelection.member for several)")

    async def start_task(self, task, samples, epochs: int) -> str:
        self.refuse_second_task()
        check_samples(task, samples)
        reader = self.reader.resolve(task.scorers)
        judge = None
        if self.judge_reader is not None:
            judge = self.judge_reader.resolve(task.scorers)
            if judge.scorer == reader.scorer:
                raise SetupError(f"the judge and the scored label are the same scorer {reader.scorer!r}")
            if reader.scorer not in self.gated:
                raise SetupError(f"scorer {reader.scorer!r} would run on every sample: wrap it with this manager's "
                                 "gate() so that it runs only where the test needs a label")
        ids = [s.id for s in samples]
        size = len(ids)
        self.selection.register(self.candidate, size)
        if self.budget is not None and self.budget > size:
            raise SetupError(f"budget {self.budget} is more than the task's {size} samples")
        horizon = self.budget or size
        if judge is not None:  # R-AutoEval+: horizon in labels, one label per ratio + 1 samples
            horizon = max(1, horizon // (self.ratio + 1))
        # the job's policy kind and settings, built as a certsel job builds them
        kind = POLICY_KINDS.lookup("r-eval" if judge is None else "r-autoeval+")
        settings = PolicySettings(alpha=self.alpha, delta=self.delta, budget=horizon, betting=self.strategy,
                                  r=0 if judge is None else self.ratio, observation="split",
                                  sampling=sampling_named(self.sampling, size),
                                  futility=self.futility)
        test, fut = with_futility(kind, settings, PolicyInputs(size, human_items=np.arange(horizon)))
        claim = self._claim(task, samples, epochs, reader, judge is not None)
        ledger = ScheduleLedger(ids, epochs)
        run = _Run(task=task.task, model=str(task.model), size=size, epochs=int(epochs), reader=reader,
                   ledger=ledger, test=test, futility=fut, horizon=horizon, losses=[],
                   judge=None if judge is None else JudgeFeed(judge, self.ratio), claim=claim)
        if claim is not None and claim.base is not None:  # the claim's test goes on from where it stands
            base = claim.base
            run.test = SequentialTest.from_state_dict(base.run.state["test"], self.strategy)
            run.futility = (None if "futility" not in base.run.state
                            else SequentialTest.from_state_dict(base.run.state["futility"], self.strategy))
            run.horizon = int(run.test.horizon)
            run.earlier, run.consumed = list(base.ids), set(base.ids)
            run.losses, run.path = base.losses.tolist(), base.path.tolist()
            # started before, not yet in the test: they keep their places, next in the order, and those scored their
            # scores. Putting them back in the pool would not be valid: the first of them is unfinished because it
            # is slow, often because it is wrong, and a test that skips past it could skip past every such sample
            for i, value in base.pending:
                ledger.schedule(i)
                if value is not None:
                    for e in range(1, ledger.epochs + 1):
                        ledger.complete(i, e, value)
        self.run = run
        self.certificate = None
        self.selection.feed(self.snapshot(run.path))  # running; a continued claim's evidence so far
        pending = self.selection.pending.pop(self.candidate, None)
        if pending is not None:  # the selection no longer needed it before its task started
            self.stop(StopReason.NOT_NEEDED, pending)
        if claim is not None and claim.base is not None:
            self._released()  # an earlier run's scores that come next
            self.selection.update()  # a continued claim may be decided already
        return "certsel"

    def _claim(self, task, samples, epochs: int, reader, judged: bool) -> TaskClaim | None:
        """The task's claim in its selection's ledger, held (None: the ledger is off)."""
        sel = self.selection
        if sel.store is None:
            return None
        where = f"{self.candidate} ({task.model} on task {task.task})"
        settings = {"betting": self.strategy.spec(), "sampling": self.sampling, "futility_level": self.futility,
                    "judged": judged}
        claim = None
        try:
            claim = TaskClaim.open(sel.store, task_identity(task, samples, epochs, reader.words), self.alpha,
                                   where=where, delta=self.delta, settings=settings,
                                   member=sel.member_of(self.candidate))
            sel.claim_started(self.candidate, claim, where)
        except BaseException as err:
            if claim is not None:
                claim.finish(0, "", None)
            sel.refused = str(err)  # no candidate of the selection runs another sample
            raise
        return claim

    def claim_state(self) -> dict:
        """The claim's test as it stands, as the ledger keeps it."""
        run, claim = self.run, self.run.claim
        settings = {"betting": self.strategy.spec(), "sampling": self.sampling, "futility_level": self.futility,
                    "judged": run.judge is not None, "member": self.selection.member_of(self.candidate)}
        before = None if claim.base is None else claim.base.run.state
        if run.judge is not None:  # not continued (TaskClaim.open refuses it): its run is recorded, not its test
            return {"kind": KIND, **settings, "jobs": [*((before or {}).get("jobs", [])), claim.holder],
                    "runs": 1, "delta": self.delta}
        return test_state(test=run.test, futility=run.futility, ids=run.tested_ids(), losses=run.losses,
                          path=run.path, pending=run.pending(), settings=settings,
                          jobs=[*((before or {}).get("jobs", [])), claim.holder],
                          runs=(before or {}).get("runs", 0) + 1,
                          first_delta=(before or {}).get("delta", self.delta))

    def write_ahead(self) -> None:
        """The claim's test into the ledger as it stands, with the samples started and the scores not yet in it."""
        run = self.run
        if run.claim is not None and run.judge is None:
            run.claim.write_ahead(run.scored, self.claim_state())

    def record_claim(self, certified: bool) -> None:
        """The claim's test after this eval, with its outcome, into the ledger (nothing added: the hold ends)."""
        run = self.run
        if run is None or run.claim is None:
            return
        added = run.ledger.scheduled > 0  # nothing started here: the claim's test is where it stood
        if certified:
            outcome = "pass"
        elif run.stop is StopReason.FUTILE or self.exact_pass() is False:
            outcome = "fail"
        else:
            outcome = "undecided"
        run.claim.finish(run.scored, outcome, self.claim_state() if added else None)

    async def schedule_sample(self, id, epoch: int):
        from inspect_ai.util import EarlyStop

        run = self.run
        if self.selection.refused is not None:
            self.stop(StopReason.REFUSED, self.selection.refused)
        if id in run.consumed:  # its claim's test saw it in an earlier run
            run.skipped_runs += 1
            return EarlyStop(id=id, epoch=epoch, reason="scored by an earlier run of its claim",
                             metadata={"manager": "certsel"})
        if run.ledger.done(id):  # started by an earlier run, its score recorded: it has its place in the test
            run.skipped_runs += 1
            return EarlyStop(id=id, epoch=epoch, reason="scored by an earlier run of its claim",
                             metadata={"manager": "certsel"})
        new = not run.ledger.is_scheduled(id)
        if run.stop is None and new and self.budget is not None and run.started >= self.budget:
            run.budget_hit = True
            return self._skip(EarlyStop, id, epoch, f"budget of {self.budget} samples reached")
        if run.stop is not None:
            return self._skip(EarlyStop, id, epoch, f"{run.stop.value}: {run.why}")
        run.ledger.schedule(id)
        if new:  # its place in the order, kept before it can finish: a kill leaves it there (certsel/inspect/claims.py)
            self.write_ahead()
        return None

    async def complete_sample(self, id, epoch: int, scores) -> None:
        run = self.run
        try:
            value = self._read(id, epoch, scores)
        except ScoreError as err:
            # no silent 0: the run stops, the certificate says why, and the task fails with the line
            self.refuse(str(err))
            raise
        if not run.ledger.is_scheduled(id):
            # inspect reports samples reused from an earlier log (eval_retry) unscheduled: their place is unknown
            err = SetupError(f"sample {id!r} was scored without being scheduled (reused from an earlier log?); "
                             "certsel cannot place it in the random order: run the task afresh")
            self.refuse(str(err))
            raise err
        run.ledger.complete(id, epoch, value)
        self._released()

    def _released(self) -> None:
        """The scores now complete at the front of the order, to the test; then the claim's test written ahead (every
        score, before inspect shows it: a kill loses none, certsel/inspect/claims.py)."""
        run = self.run
        fresh = run.ledger.release()
        if run.judge is not None:
            fresh = run.judge.blocks(fresh)
        if fresh is not None and len(fresh):
            self._feed(fresh)
            self.selection.update()
        self.write_ahead()

    def _read(self, id, epoch: int, scores):
        """A sample-epoch's score: a number, or (label or NaN, judge) in judge-assisted testing."""
        run = self.run
        where = f"sample {id!r}, epoch {epoch}"
        if run.judge is None:
            return run.reader.read(scores, where)
        judge = run.judge.reader.read(scores, where)
        labelled = self.needs_label(id)
        given = scores.get(run.reader.scorer)
        skipped = given is not None and (given.score.metadata or {}).get("certsel") == NOT_LABELLED
        if labelled == skipped:
            raise ScoreError(f"{where}: the gated scorer {run.reader.scorer!r} "
                             f"{'skipped' if skipped else 'scored'} a sample the test "
                             f"{'needs' if labelled else 'does not need'}; is it gated by another manager?")
        return (run.reader.read(scores, where) if labelled else np.nan, judge)

    def _feed(self, fresh) -> None:
        """New scores to the test, and its evidence to the selection's session."""
        run = self.run
        if run.judge is None:
            losses = 1.0 - fresh
            run.losses.extend(losses.tolist())
            path = np.atleast_1d(run.test.update(losses)).tolist()
            if run.futility is not None:
                run.futility.update(fresh)
        else:
            h, jl, ju = fresh
            run.losses.extend((1.0 - h).tolist())
            run.judge.fed(h, jl, ju)
            path = np.atleast_1d(run.test.update(1.0 - h, 1.0 - jl, 1.0 - ju)).tolist()
            if run.futility is not None:  # mirrored: the scores against T
                run.futility.update(h, jl, ju)
        run.path.extend(path)
        self.selection.feed(self.snapshot(path))

    def refuse(self, why: str) -> None:
        """Its scores cannot be read: it stops, and the session ends it as a failed source."""
        self.stop(StopReason.REFUSED, why)
        self.selection.feed(self.snapshot(error=why))

    # -- judge-assisted testing ----------------------------------------------------------------------
    def needs_label(self, id) -> bool:
        """Whether the test needs ``id``'s label: one in every ratio + 1 in schedule order (all without a judge)."""
        run = self.run
        if run is None or run.judge is None:
            return True
        return run.ledger.position[id] % (self.ratio + 1) == 0

    def gate(self, scorer, name: str | None = None):
        """``scorer`` (an inspect Scorer) made to run only on the samples whose label the test needs; on the others
        it returns a score marked "not labelled" (value 0, ignored by its metric). ``name``: its name in the task
        (default: the scorer's own)."""
        gated, name = gated_scorer(scorer, name, self.needs_label)
        self.gated.add(name)
        return gated

    async def complete_task(self) -> dict:
        run = self.run
        run.done = True
        self.selection.feed(self.snapshot())  # out of samples: no more evidence will come
        self.selection.update()
        self.selection.member_finished()
        self.certificate = self.certificate or self.make_certificate()  # the selection's, once it has finished
        return self.certificate.to_dict()

    # -- decisions ---------------------------------------------------------------------------------
    def exact_pass(self) -> bool | None:
        """Whether the exactly known mean is >= T (every sample scored without replacement); None until then."""
        run = self.run
        if self.sampling != WithoutReplacement.name or run.scored < run.size:
            return None
        return bool(np.mean(run.losses) <= self.alpha)

    def stop(self, reason: StopReason, why: str) -> None:
        run = self.run
        if run.stop is None:
            run.stop, run.why = reason, why
            run.decided_at, run.scheduled_at_stop = run.scored, run.started

    def _skip(self, early_stop, id, epoch, why: str):
        run = self.run
        run.skipped_runs += 1
        if not run.ledger.is_scheduled(id):
            run.skipped.add(id)
        return early_stop(id=id, epoch=epoch, reason=why, metadata={"manager": "certsel"})

    # -- the certificate ------------------------------------------------------------------------------
    def lower_bound(self, level: float) -> float:
        """The one-sided lower bound on the mean score at 1 - ``level`` that inverts the test itself (>= T exactly
        when the test certified at ``level``); the exact mean once every sample was scored without replacement."""
        run = self.run
        exact = self.exact_pass()
        if exact is not None:
            return float(1.0 - np.mean(run.losses))
        if not run.losses:
            return 0.0
        test = run.test  # its own bets, seeded with its evidence, as a job's candidate inverts its test
        kw = dict(level=level, delta=test.delta, alpha=test.alpha, rhos=test.rhos, betting=self.strategy,
                  horizon=run.horizon, max_log_evalue=test.max_log_evalue, observation=test.observation,
                  sampling=test.sampling,
                  past_horizon=run.claim is not None and run.claim.base is not None)  # a continued test may pass it
        if run.judge is not None:
            h, jl, ju = run.judge.all()
            u = decision_upper_bound(1.0 - h, 1.0 - jl, 1.0 - ju, **kw)
        else:
            u = decision_upper_bound(np.asarray(run.losses), **kw)
        return float(1.0 - u)

    def statement(self) -> tuple[float, bool, float | None]:
        """(level, certified, lower bound on the mean score): the procedure's decision and its joint bound (>= T
        exactly when certified; None: no statement), on the final evidence once every candidate is done."""
        certified, levels, lower = self.selection.final_joint or self.selection.joint()
        k = self.index
        return float(levels[k]), bool(certified[k]), None if np.isnan(lower[k]) else float(lower[k])

    def make_certificate(self) -> TaskRecord:
        run = self.run
        level, certified, bound = self.statement()
        exact = self.exact_pass()
        if certified:
            status = StopReason.CERTIFIED
        elif run.stop in (StopReason.FUTILE, StopReason.REFUSED, StopReason.NOT_NEEDED):
            status = run.stop
        elif run.budget_hit:
            status = StopReason.BUDGET
        else:
            status = None
        if exact is not None:
            mean = 1.0 - float(np.mean(run.losses))
            why = (f"every sample scored: the mean score is {mean:.6g}, "
                   f"{'at least' if certified else 'below'} {self.at_least:g}")
        elif run.stop is None:
            why = f"budget of {self.budget} samples reached" if run.budget_hit else "no decision before the task ended"
        elif status is run.stop or run.stop is not StopReason.CERTIFIED:
            why = run.why
        else:  # its own test passed, the procedure over all candidates did not certify it
            why = (f"{run.why}, but {self.procedure_words()} does not certify it on the evidence of all "
                   "candidates")
        counts = SampleCounts(total=run.size, scheduled=run.ledger.scheduled, scored=run.scored,
                              at_decision=run.decided_at if run.stop is not None else run.scored,
                              in_flight_at_stop=(run.scheduled_at_stop - run.decided_at) if run.stop else 0,
                              skipped=len(run.skipped), skipped_runs=run.skipped_runs,
                              unfinished=run.ledger.pending, earlier=len(run.earlier))
        fut = run.futility
        return TaskRecord(
            task=run.task, model=run.model, candidate=self.candidate, scorer=run.reader.words,
            at_least=self.at_least, delta=level, certified=certified,
            status=status.value if status is not None else "not certified", reason=why,
            log_e_value=float(run.test.max_log_evalue), threshold=1.0 / level, lower_bound=bound,
            estimate=float(1.0 - np.mean(run.losses)) if run.losses else float("nan"),
            futility_log_e_value=None if fut is None else float(fut.max_log_evalue), futility=self.futility,
            samples=counts, epochs=run.epochs, sampling=self.sampling, betting=self.strategy.name,
            exact=exact is not None, procedure=None if self.selection.K == 1 else self.procedure_words(),
            final=self.selection.all_done, judge=None if run.judge is None else run.judge.summary(),
            job_id=None if self.selection.job is None else self.selection.job.job_id)

    def procedure_words(self) -> str:
        return self.selection.proc.level(self.delta, self.selection.K)
