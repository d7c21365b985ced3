"""One candidate's evaluation state: its policy and its label-source client (no Ray here).

A :class:`TestingCandidate` runs the R-Eval / R-AutoEval / R-AutoEval+ e-process
(:class:`certsel.policies.SequentialTest`) on items in the job's seeded order: the t-th human label is paired with
judge-only items r(t-1)..rt-1, exactly as Algorithm 1 pairs them, so a run stopped after m labels has the e-values of
the first m entries of the full-budget path. An :class:`EstimationCandidate` runs Seq or Cer-Eval with
``threshold=alpha`` (the policy chooses the items). A :class:`LabelServer` serves losses on demand for pairwise
comparisons, which live in the driver. The Ray actor in :mod:`certsel.workers.actor` hosts these objects.
"""

from __future__ import annotations

import numpy as np


from certsel.errors import first_line
from certsel.policies import SequentialTest, confidence_interval, decision_upper_bound, judge_agreement
from certsel.policies.kinds import Family, JudgeUse, Labels, PolicyInputs, PolicyKind, PolicySettings, with_futility
from certsel.policies.limits import label_limit, ppi_limit, ppi_stop_limit, stop_limit

from .contracts import JobArrays, LabelSource, LabelsPending, Snapshot


class _Candidate:
    def __init__(self, name: str, source: LabelSource):
        self.name = name
        self.source = source
        self.waiting = 0  # answers its source awaits from people (LabelsPending)
        # items a choosing policy has drawn and awaits (an annotation queue): kept, since drawing again draws others
        self.asked: np.ndarray | None = None

    @property
    def holds_unlabelled(self) -> bool:
        """Whether its policy has drawn items still unlabelled (no snapshot now: a restored policy would draw them
        again)."""
        return self.asked is not None

    def labels_for(self, items) -> np.ndarray:
        """The human labels of ``items``, all of them or :class:`LabelsPending` (the count awaited is kept)."""
        try:
            h = self.source.human(items)
        except LabelsPending as pending:
            self.waiting = pending.waiting
            raise
        self.waiting = 0
        return h

    def failed(self, err: Exception) -> Snapshot:
        """The snapshot of a candidate whose source failed (state unchanged: a batch is consumed whole or not at all).
        """
        snap = self.snapshot()
        snap.error = first_line(err, limit=300)
        return snap

    def counters(self) -> Snapshot:
        """What the candidate bought so far."""
        # reused_labels: a source wrapped by the label store (or by a log over one) counts them
        return Snapshot(self.name, n_human=self.source.human_labels, n_judge=self.source.judge_labels,
                        requests=self.source.requests, reused=getattr(self.source, "reused_labels", 0),
                        baseline=getattr(self.source, "baseline_labels", None), waiting=self.waiting)


class TestingCandidate(_Candidate):
    """Anytime-valid test of H0: R > alpha for one candidate (Algorithm 1 of R-AutoEval+). ``human_items`` (n,) and
    ``judge_items`` (r n,) are the job's shared item order (horizon n, as in the full-budget computation); ``ci_delta``
    is the level of the reported two-sided interval (delta under FST, delta/K under Bonferroni/Holm, so the intervals
    are simultaneous); ``intervals``: ``"every_round"``, ``"final"`` or ``"none"``."""

    __test__ = False  # a domain name, not a pytest test class

    def __init__(self, name, source, test: SequentialTest, *, human_items, judge_items, ci_delta,
                 intervals="final", futility: SequentialTest | None = None):
        super().__init__(name, source)
        self.test = test
        self.rhos = test.rhos
        self.n = int(len(human_items))
        self.human_items = np.asarray(human_items, dtype=np.int64)
        self.judge_items = np.asarray(judge_items, dtype=np.int64)
        self.r = self.test.r
        if self.test.uses_judge and self.judge_items.size != self.r * self.n:
            raise ValueError(f"{name}: need r*n = {self.r * self.n} judge-only items, got {self.judge_items.size}")
        self.ci_delta, self.intervals = ci_delta, intervals
        self.betting = self.test.strategy
        # futility: the same test on mirrored losses certifies R >= alpha; reaching 1/futility stops it as hopeless
        self.futility = futility
        self._h: list[np.ndarray] = []
        self._jl: list[np.ndarray] = []
        self._ju: list[np.ndarray] = []
        self._ci: tuple[float, float] | None = None
        self._bound: dict = {}  # level -> upper bound (cleared by new labels)
        self._futility_path: np.ndarray | None = None  # the futility test's log E after each label of the last step

    @classmethod
    def from_kind(cls, name, source, kind: PolicyKind, settings: PolicySettings, inputs: PolicyInputs):
        """The kind's e-process on the job's shared order, and its mirrored futility test."""
        test, futility = with_futility(kind, settings, inputs)
        return cls(name, source, test, human_items=inputs.human_items,
                   judge_items=inputs.judge_items, ci_delta=settings.ci_delta, intervals=settings.intervals,
                   futility=futility)

    @classmethod
    def continued(cls, name, source, state: dict, *, human_items, judge_items, ci_delta, intervals="final",
                  strategy=None):
        """The candidate of a continued claim (workers/claims.py): its recorded test (policy, bet, horizon, judge
        ratio) in the recorded state, on ``human_items`` / ``judge_items`` (the consumed items first). ``strategy``: the
        bet object when the recorded spec is not in this process's registry."""
        test = SequentialTest.from_state_dict(state["test"], strategy)
        futility = None if "futility" not in state else SequentialTest.from_state_dict(state["futility"], strategy)
        c = cls(name, source, test, human_items=human_items, judge_items=judge_items, ci_delta=ci_delta,
                intervals=intervals, futility=futility)
        c._held(state)
        return c

    @property
    def t(self) -> int:
        return self.test.n

    @property
    def horizon(self) -> int:
        """The horizon the test was planned with (its bets and the bounds that invert it use it); a continued claim's
        budget can go past it."""
        return self.test.horizon

    def claim_state(self) -> dict:
        """What the store's ledger keeps of this candidate's claim: its state and the items it consumed, in order."""
        return {"candidate": self.state_dict(), "human_items": self.human_items[: self.t].copy(),
                "judge_items": self.judge_items[: self.r * self.t].copy() if self.test.uses_judge
                else np.zeros(0, dtype=np.int64)}

    def _data(self):
        h = np.concatenate(self._h) if self._h else np.zeros(0)
        if not self.test.uses_judge:
            return h, None, None
        if not self._jl:  # no label yet (the claim's test written ahead before its first round)
            return h, np.zeros(0), np.zeros(0)
        return h, np.concatenate(self._jl), np.concatenate(self._ju)

    def interval(self) -> tuple[float, float]:
        """Two-sided anytime-valid interval on R from the labels so far (App. D.5)."""
        if self._ci is None:
            h, jl, ju = self._data()
            if h.size == 0:
                self._ci = (0.0, 1.0)
            else:
                lo, hi = confidence_interval(h, jl, ju, delta=self.ci_delta, rhos=self.rhos,
                                             betting=self.betting.interval_strategy(),
                                             horizon=self.horizon, sampling=self.test.sampling, past_horizon=True)
                self._ci = (float(lo), float(hi))
        return self._ci

    def upper_bound(self, level: float) -> float:
        """The one-sided upper bound that inverts this candidate's own test at ``level``
        (:func:`~certsel.policies.autoeval_bounds.decision_upper_bound`): the test's own bets, seeded with its recorded
        evidence, so it is <= alpha exactly when the e-process reached 1/level."""
        if level not in self._bound:
            h, jl, ju = self._data()
            self._bound[level] = 1.0 if h.size == 0 else float(decision_upper_bound(
                h, jl, ju, level=level, delta=self.test.delta, alpha=self.test.alpha, rhos=self.rhos,
                betting=self.betting, horizon=self.horizon, max_log_evalue=self.test.max_log_evalue,
                observation=self.test.observation, sampling=self.test.sampling, past_horizon=True))
        return self._bound[level]

    def judge_report(self) -> dict | None:
        """The judge's agreement with the human labels on its labelled items (None without a judge)."""
        if not self.test.uses_judge or self.t == 0:
            return None
        h, jl, _ = self._data()
        return judge_agreement(h, jl)

    def label_minimum(self, level: float) -> float | None:
        """The fewest human labels any level-``level`` test would need on average, estimated from this candidate's
        labels (:mod:`certsel.policies.limits`): log(1/level) / KL_inf of its human losses, or with a judge the
        prediction-powered floor at the best rho (judge mean from every judge label bought). None when its labels do not
        put R below alpha."""
        if self.t == 0:
            return None
        h, jl, ju = self._data()
        if not self.test.uses_judge:
            limit = label_limit(h, self.test.alpha, level)
        else:
            limit = ppi_limit(h, jl, self.test.alpha, level, judge_mean=float(np.mean(np.concatenate([jl, ju])))).labels
        return None if not np.isfinite(limit) else float(limit)

    def stop_minimum(self, level: float, gamma: float) -> float | None:
        """The fewest human labels any procedure needs, on average, to end this candidate within its budget without
        certifying it (:func:`~certsel.policies.limits.stop_limit`; with a judge its floor over rho), estimated from its
        labels; None when they make it look certifiable, nothing forces a label, or it has none."""
        if self.t == 0:
            return None
        h, jl, ju = self._data()
        if not self.test.uses_judge:
            limit = stop_limit(h, self.test.alpha, level, self.n, gamma)
        else:
            limit = ppi_stop_limit(h, jl, self.test.alpha, level, self.n, gamma,
                                   judge_mean=float(np.mean(np.concatenate([jl, ju]))))
        return float(limit) if np.isfinite(limit) and limit > 0 else None

    def estimate(self) -> float:
        """The R-AutoEval+ point estimate: unbiased at a fixed number of labels, not at a stop that depends on the
        evidence."""
        return float(self.test.estimate)

    def fetch(self, batch: int):
        """Buy the next ``b <= batch`` human labels (with judge labels): (h, jl, ju), jl = ju = None for R-Eval; None
        when the budget is spent."""
        t = self.t
        b = min(int(batch), self.n - t)
        if b <= 0:
            return None
        items = self.human_items[t : t + b]
        try:
            h = self.labels_for(items)
        except LabelsPending as pending:  # labels in order: the answered prefix goes on now
            if pending.ready <= 0:
                raise
            b, items = pending.ready, items[: pending.ready]
            h = self.source.human(items)
        jl = ju = None
        if self.test.uses_judge:
            jl = self.source.judge(items)
            ju = self.source.judge(self.judge_items[self.r * t : self.r * (t + b)])
            self._jl.append(jl)
            self._ju.append(ju)
        self._h.append(h)
        return h, jl, ju

    # -- snapshots (workers/labellog.py) --------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit: e-process state, held labels, running sums."""
        h, jl, ju = self._data()
        out = {"kind": "testing", "t": self.t, "test": self.test.state_dict(), "h": h, "jl": jl, "ju": ju}
        if self.futility is not None:
            out["futility"] = self.futility.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != "testing":
            raise ValueError(f"{self.name}: the snapshot is not of this candidate's test")
        test = SequentialTest.from_state_dict(state["test"], self.test.strategy)
        mine = self.test
        if (test.horizon != mine.horizon or test.alpha != mine.alpha or test.observation != mine.observation
                or test.delta != mine.delta or test.r != mine.r
                or not np.array_equal(test.rhos, mine.rhos) or test.batch_shape != ()):
            raise ValueError(f"{self.name}: the snapshot is not of this candidate's test")
        self.test = test
        if self.futility is not None:
            if "futility" not in state:
                raise ValueError(f"{self.name}: the snapshot has no futility test")
            self.futility = SequentialTest.from_state_dict(state["futility"], self.futility.strategy)
        self._held(state)

    def _held(self, state: dict) -> None:
        """The labels the (restored) test consumed, from its state."""
        h = np.asarray(state["h"], dtype=np.float64)
        if h.size != self.test.n:
            raise ValueError(f"{self.name}: the snapshot holds {h.size} labels for {self.test.n} test updates")
        self._h = [h] if h.size else []
        if self.test.uses_judge:
            self._jl = [np.asarray(state["jl"], dtype=np.float64)] if h.size else []
            self._ju = [np.asarray(state["ju"], dtype=np.float64)] if h.size else []
        self._ci = None
        self._bound = {}

    def stacks_with(self, other: TestingCandidate) -> bool:
        """Whether one stacked update can advance both (the same test configuration; continued claims may differ)."""
        same = self.test._key() == other.test._key()
        return same and (self.futility is None) == (other.futility is None) and (
            self.futility is None or self.futility._key() == other.futility._key())

    def after_update(self, path, numbers=None) -> Snapshot:
        self._ci = None
        self._bound = {}
        if self.intervals == "every_round":
            self.interval()
        return self.snapshot(path, numbers)

    def step(self, batch: int) -> Snapshot:
        return self.absorb(self.fetch(batch))

    def absorb(self, got) -> Snapshot:
        """The test (and its futility mirror) updated with labels :meth:`fetch` returned."""
        if got is None:
            return self.snapshot()
        if self.futility is not None:
            self._futility_path = np.asarray(self.futility.update(*mirrored(*got)), dtype=np.float64)
        return self.after_update(self.test.update(*got))

    def snapshot(self, path=None, numbers=None) -> Snapshot:
        """``path``: log E after each label of this step (none: no new label); ``numbers``: (log E, max log E, rho
        weights, estimate) when already computed for a stacked batch (:func:`step_together`)."""
        if numbers is None:
            numbers = (float(self.test.log_evalue), float(self.test.max_log_evalue), self.test.rho_weights.tolist(),
                       self.estimate())
        out = self.counters()
        out.t, out.exhausted = self.t, self.t >= self.n
        out.path = np.zeros(0) if path is None else np.asarray(path, dtype=np.float64)
        out.log_e, out.max_log_e, out.rho_weights, out.estimate = numbers
        out.ci = self._ci
        if self.futility is not None:
            out.futility_log_e = float(self.futility.max_log_evalue)
            out.futility_path, self._futility_path = self._futility_path if path is not None else None, None
        return out


class EstimationCandidate(_Candidate):
    """Seq / Cer-Eval with ``threshold=alpha``: certified when the upper end of the anytime-valid interval falls below
    alpha, hopeless when the lower end rises above it."""

    def __init__(self, name, source, policy, *, budget: int, kind: PolicyKind):
        super().__init__(name, source)
        self.policy, self.kind = policy, kind
        self.n = min(int(budget), source.n_items)

    @classmethod
    def from_kind(cls, name, source, kind: PolicyKind, settings: PolicySettings, inputs: PolicyInputs):
        return cls(name, source, kind.build(settings, inputs), budget=settings.budget, kind=kind)

    @property
    def t(self) -> int:
        return self.policy.n_labeled

    def interval(self) -> tuple[float, float]:
        lo, hi = self.policy.ci
        return float(lo), float(hi)

    def state_dict(self) -> dict:
        return {"kind": "estimation", "t": self.t, "policy": self.policy.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != "estimation":
            raise ValueError(f"{self.name}: the snapshot is not of an estimation policy")
        policy, state = self.policy, state["policy"]
        if (state.get("policy") != policy.name or state.get("n_items") != policy.n_items
                or state.get("delta") != policy.delta or state.get("threshold") != policy.threshold):
            raise ValueError(f"{self.name}: the snapshot is not of this {policy.name} policy")
        self.policy = self.kind.restore(policy, state)

    def step(self, batch: int) -> Snapshot:
        b = min(int(batch), self.n - self.t)
        if self.asked is None and b > 0 and not self.policy.done:
            items = self.policy.next_items(b)
            self.asked = items if items.size else None
        if self.asked is not None:
            h = self.labels_for(self.asked)  # LabelsPending: the drawn items wait for the next step
            items, self.asked = self.asked, None
            self.policy.update(items, h)
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        out = self.counters()
        out.t, out.exhausted = self.t, self.t >= self.n or self.policy.exhausted
        out.decision, out.estimate, out.ci = int(self.policy.decision), float(self.policy.estimate), self.interval()
        out.upper_bound = float(self.policy.upper_bound)  # one-sided, at the policy's level (its decision's)
        return out


class LabelServer(_Candidate):
    """Serves one model's losses on the items a pairwise comparison asks for (``role`` "judge": the judge's losses, for
    Cer-Eval's judge strata)."""

    def losses(self, items, role: str = "human") -> np.ndarray:
        return self.source.judge(items) if role == "judge" else self.source.human(items)

    def snapshot(self) -> Snapshot:
        return self.counters()


def mirrored(h, jl=None, ju=None):
    """Losses l -> 1 - l (losses in [0, 1]): R becomes 1 - R, so a test of the mirrored losses against 1 - alpha
    certifies R >= alpha."""
    return 1.0 - h, None if jl is None else 1.0 - jl, None if ju is None else 1.0 - ju


class ChosenTestingCandidate(_Candidate):
    """A test of H0: R > alpha that chooses its items (:class:`~certsel.policies.StratifiedTest`: the judge's loss on
    every item first, bought and logged before any human label, then human labels drawn by judge strata); snapshot
    fields as :class:`TestingCandidate`, without rho weights."""

    __test__ = False

    def __init__(self, name, source, test, *, kind: PolicyKind, intervals="final"):
        super().__init__(name, source)
        self.test, self.kind = test, kind
        self.n = test.horizon
        self.intervals = intervals

    @classmethod
    def from_kind(cls, name, source, kind: PolicyKind, settings: PolicySettings, inputs: PolicyInputs):
        return cls(name, source, kind.build(settings, inputs), kind=kind, intervals=settings.intervals)

    @property
    def t(self) -> int:
        return self.test.n

    def interval(self) -> tuple[float, float]:
        return self.test.interval()

    def upper_bound(self, level: float) -> float:
        return self.test.upper_bound(level)

    def judge_report(self) -> dict | None:
        if self.t == 0:
            return None
        items, h = self.test.labelled()
        return judge_agreement(h, self.test.judge[items])

    def label_minimum(self, level: float) -> float | None:
        """As :meth:`TestingCandidate.label_minimum`, with the judge's mean over the whole test set (the judge scored
        every item)."""
        if self.t == 0:
            return None
        items, h = self.test.labelled()
        limit = ppi_limit(h, self.test.judge[items], self.test.alpha, level, judge_mean=float(self.test.judge.mean())).labels
        return None if not np.isfinite(limit) else float(limit)

    def stop_minimum(self, level: float, gamma: float) -> float | None:
        """As :meth:`TestingCandidate.stop_minimum`, with the judge's mean over the whole test set."""
        if self.t == 0:
            return None
        items, h = self.test.labelled()
        limit = ppi_stop_limit(h, self.test.judge[items], self.test.alpha, level, self.n, gamma,
                               judge_mean=float(self.test.judge.mean()))
        return float(limit) if np.isfinite(limit) and limit > 0 else None

    def step(self, batch: int) -> Snapshot:
        if self.asked is None:
            items = self.test.next_items(batch)
            if items.size == 0:
                return self.snapshot()
            self.asked = items
        h = self.labels_for(self.asked)  # LabelsPending: the drawn items wait for the next step
        items, self.asked = self.asked, None
        path = self.test.update(items, h)
        return self.snapshot(path)

    def snapshot(self, path=None) -> Snapshot:
        out = self.counters()
        out.t, out.exhausted = self.t, self.t >= self.n
        out.path = np.zeros(0) if path is None else np.asarray(path, dtype=np.float64)
        out.log_e, out.max_log_e = self.test.log_evalue, self.test.max_log_evalue
        out.estimate = self.test.estimate
        # the stratified sequence keeps its bounds up to date: reading them costs nothing
        out.ci = self.test.interval() if self.t and self.intervals != "none" else None
        if self.test.futility is not None:
            out.futility_log_e = self.test.futility_max_log_evalue
            out.futility_path = None if path is None else self.test.last_futility_path
        return out

    def state_dict(self) -> dict:
        return {"kind": self.kind.name, "t": self.t, "test": self.test.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != self.kind.name:
            raise ValueError(f"{self.name}: the snapshot is not of a {self.kind.name} test")
        self.test = self.kind.restore(self.test, state["test"])


ADAPTERS = {  # what drives a policy of each (family, labels): the loop around its decisions
    (Family.TESTING, Labels.ORDER): TestingCandidate,
    (Family.TESTING, Labels.CHOSEN): ChosenTestingCandidate,
    (Family.ESTIMATION, Labels.CHOSEN): EstimationCandidate,
}


def policy_candidate(name: str, source: LabelSource, kind: PolicyKind, settings: PolicySettings,
                     arrays: JobArrays):
    """The candidate that runs ``kind``'s policy on ``source``, with the job's shared order and item features
    (:class:`JobArrays`) as inputs (the judge's loss on every item first when the kind asks for it)."""
    scores = source.judge(np.arange(source.n_items)) if kind.judge_use(settings.partition) is JudgeUse.FIRST else None
    inputs = PolicyInputs(source.n_items, human_items=arrays.human_items, judge_items=arrays.judge_items,
                          features=arrays.features, judge_scores=scores)
    return ADAPTERS[(kind.family, kind.labels)].from_kind(name, source, kind, settings, inputs)
