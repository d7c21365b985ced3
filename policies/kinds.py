"""Policy kinds: what each policy needs from a job, and how its policy object is built.

A job's ``policy.kind`` names a :class:`PolicyKind` in :data:`POLICY_KINDS`. The entry *declares* what the policy needs,
and validation, plan, workers and reports read those declarations instead of comparing names:

* :attr:`PolicyKind.family`: :attr:`Family.TESTING` policies run an e-process for H0: R > alpha, thresholded by the
  multiple-testing procedure; :attr:`Family.ESTIMATION` policies keep an anytime-valid interval on R that decides R
  against alpha at the policy's own level.
* :attr:`PolicyKind.labels`: :attr:`Labels.ORDER` policies label the job's seeded item order (every candidate the same
  items; r judge-only items per human label) as a :class:`~certsel.policies.SequentialTest`; :attr:`Labels.CHOSEN`
  policies choose their own items (``next_items(b)`` then ``update(items, losses)``).
* :meth:`PolicyKind.judge_use`: no judge, judge labels paired with each human label (``budget.r``), or the judge's loss
  on every item before any human label.

:meth:`PolicyKind.build` turns :class:`PolicySettings` (one candidate's numbers) and :class:`PolicyInputs` (from the
label source and the plan) into the policy object; :meth:`PolicyKind.restore` rebuilds it from its ``state_dict()``. A
new kind is a subclass and :func:`register_policy_kind`; Ray ships it to the workers by value when it lives in user
code.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from .autoeval import SCHEMES, log_evalue_paths
from .betting import BettingStrategy
from .cer_eval import CerEval, Seq
from .partition import NearestNeighborPartition, ScorePartition
from .registry import Registry
from .seq_bank import SeqBank
from .sampling import IID, Sampling
from .sequential import SequentialTest
from .judge_stratified import StratifiedTest


class Family(StrEnum):
    TESTING = "testing"  # an e-process for H0: R > alpha, thresholded by the procedure
    ESTIMATION = "estimation"  # an anytime interval on R decides R against alpha at its own level


class Labels(StrEnum):
    ORDER = "order"  # the job's seeded order, the same items for every candidate (a SequentialTest)
    CHOSEN = "chosen"  # the policy chooses its items: next_items(b), then update(items, losses)


class JudgeUse(StrEnum):
    NONE = "none"
    PAIRED = "paired"  # judge losses on each human-labelled item and on r judge-only items per label
    FIRST = "first"  # the judge's loss on every item, bought before any human label


class Replication(StrEnum):
    """How ``certsel audit`` repeats a testing kind's job, vectorised over repetitions (None: not audited by
    repetition)."""

    BETTING = "betting"  # one e-process per candidate on a seeded item order (the R-Eval family)
    STRATIFIED = "stratified"  # items drawn by judge strata, per repetition


@dataclass(frozen=True)
class PolicySettings:
    """One candidate's policy numbers, from the job file and the procedure.

    ``delta``: the policy's own level (testing: the level its bets are sized for; estimation: the level its interval
    decides at); ``ci_delta``: the two-sided interval reported with a testing certificate; ``budget``: the human labels
    it may buy; ``seed``: (job seed, candidate index); ``strict`` certifies R < alpha instead of R <= alpha (pairwise
    signs, where a tie is no order).
    """

    alpha: float
    delta: float
    budget: int
    seed: tuple | list | int = (0, 0)  # anything numpy.random.default_rng takes
    betting: BettingStrategy | None = None
    r: int = 0
    observation: str = "split"
    sampling: Sampling = IID()  # how a betting test's items are drawn: IID() or WithoutReplacement(N)
    radius: str = "betting"
    partition: str = "embeddings"
    ci_delta: float | None = None
    intervals: str = "final"  # when a testing candidate computes its interval: every_round, final, none
    futility: float | None = None  # delta_f of a testing policy's futility test (None: off)
    strict: bool = False


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy is built on: the test set's size, the job's shared order (ORDER policies: ``human_items`` (n,),
    ``judge_items`` (r n,)), item features, and the judge's loss on every item (JudgeUse.FIRST)."""

    n_items: int
    human_items: np.ndarray | None = None
    judge_items: np.ndarray | None = None
    features: np.ndarray | None = None
    judge_scores: np.ndarray | None = None


class PolicyKind:
    """One ``policy.kind`` (see the module docstring). Subclasses set the class attributes and implement :meth:`build`;
    the defaults say: no judge, no features, no extra options."""

    name: ClassVar[str] = ""
    family: ClassVar[Family]
    labels: ClassVar[Labels]
    # policy.* options beyond kind, betting and radius that apply to this kind
    takes: ClassVar[frozenset[str]] = frozenset()
    # why the policy's statement holds, in words (the certificate prints it; the built-in kinds' wording is its own)
    guarantee: ClassVar[str | None] = None
    # measured human labels to certify over the kind's limit (benchmarks/limit.py, docs/results.md "limit"; None: not
    # measured). A guide to the kind's efficiency: certsel plan forecasts a job by running it, not from this ratio
    efficiency: ClassVar[float | None] = None
    replication: ClassVar[Replication | None] = None  # how certsel audit repeats it (None: it cannot)
    # whether the certificate words this kind's guarantee itself with the job's numbers (the built-in kinds)
    worded: ClassVar[bool] = False

    def judge_use(self, partition: str = "embeddings") -> JudgeUse:
        return JudgeUse.NONE

    def needs_features(self, partition: str = "embeddings") -> bool:
        return False

    def validate(self, radius: str, partition: str) -> None:
        """Rules between this kind's options (ValueError naming the option)."""

    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> Any:
        raise NotImplementedError

    def restore(self, policy, state: dict):
        """The policy rebuilt from ``state`` (its ``state_dict()``); ``policy`` is a fresh one built from the same
        settings."""
        return type(policy).from_state_dict(state)

    def reaches_at_zero(self, settings: PolicySettings, n_items: int, level: float) -> bool:
        """Whether a test of this kind reaches 1/``level`` within ``settings.budget`` human labels when every loss is 0
        (an advisory feasibility check before a job runs); True where the kind cannot say."""
        return True

    def banks(self, radius: str) -> bool:
        """Whether :meth:`build_bank` builds a bank with ``radius`` (and so takes a bet)."""
        return False

    def build_bank(self, settings: PolicySettings, n_items: int, n_runs: int, bet=None) -> Any:
        """``n_runs`` policies with the same settings and no judge on one shared order, as one vectorised object whose
        rows equal :meth:`build`'s policies (a ranking's pairs), or None (the default: one object per run). ``bet``
        (:class:`~certsel.policies.pair_bets.MarginBet`) replaces the policies' own bets."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class BettingTestKind(PolicyKind):
    """R-Eval, R-AutoEval and R-AutoEval+: testing by betting on the job's seeded order (Algorithm 1 of R-AutoEval+),
    with reliance factors ``rhos`` (0 alone: no judge)."""

    worded = True
    family = Family.TESTING
    labels = Labels.ORDER
    takes = frozenset({"observation", "sampling"})
    replication = Replication.BETTING

    def __init__(self, name: str, rhos, efficiency: float | None = None):
        self.name, self.rhos, self.efficiency = name, np.asarray(rhos, dtype=np.float64), efficiency

    def reaches_at_zero(self, settings: PolicySettings, n_items: int, level: float) -> bool:
        n, r = int(settings.budget), settings.r if self.judge_use() is JudgeUse.PAIRED else 0
        zeros = np.zeros(n)
        jl, ju = (zeros, np.zeros(r * n)) if r else (None, None)
        log_e = log_evalue_paths(zeros, jl, ju, alpha=settings.alpha, delta=settings.delta, rhos=self.rhos,
                                 betting=settings.betting, horizon=n, observation=settings.observation,
                                 sampling=settings.sampling)
        return bool(log_e.max() >= -np.log(level))

    def judge_use(self, partition: str = "embeddings") -> JudgeUse:
        return JudgeUse.PAIRED if bool(np.any(self.rhos != 0)) else JudgeUse.NONE

    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> SequentialTest:
        return SequentialTest(alpha=settings.alpha, delta=settings.delta, horizon=len(inputs.human_items),
                              rhos=self.rhos, betting=settings.betting, r=max(settings.r, 1),
                              observation=settings.observation, sampling=settings.sampling)


def with_futility(kind: PolicyKind, settings: PolicySettings, inputs: PolicyInputs):
    """A testing kind's e-process and its futility test (None without ``settings.futility``): the same kind on mirrored
    losses (1 - loss against 1 - alpha) at level delta_f, whose crossing certifies R >= alpha. Every front end builds
    its tests here."""
    futility = None
    if settings.futility is not None:
        futility = kind.build(dataclasses.replace(settings, alpha=1.0 - settings.alpha, delta=settings.futility),
                              inputs)
    return kind.build(settings, inputs), futility


class JudgeStratifiedKind(PolicyKind):
    """The judge-stratified test (:class:`~certsel.policies.StratifiedTest`): the judge's loss on every item first, then
    human labels drawn by judge strata."""

    name = "judge-stratified"
    worded = True
    family = Family.TESTING
    labels = Labels.CHOSEN
    replication = Replication.STRATIFIED
    efficiency = 1.13  # of the prediction-powered floor, with the default control scales (benchmarks/limit.py)

    def reaches_at_zero(self, settings: PolicySettings, n_items: int, level: float) -> bool:
        n = min(int(settings.budget), n_items)  # its draws come from the test set's n_items items
        test = StratifiedTest(np.zeros(n_items), alpha=settings.alpha, delta=level, horizon=n, betting=settings.betting)
        while test.drawn < n and not test.certified:
            items = test.next_items(min(64, n - test.drawn))
            test.update(items, np.zeros(items.size))
        return test.certified
    def judge_use(self, partition: str = "embeddings") -> JudgeUse:
        return JudgeUse.FIRST

    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> StratifiedTest:
        return StratifiedTest(inputs.judge_scores, alpha=settings.alpha, delta=settings.delta,
                              horizon=min(int(settings.budget), inputs.n_items), betting=settings.betting,
                              seed=int(np.random.default_rng(list(settings.seed)).integers(2**31)),
                              ci_delta=settings.ci_delta, futility=settings.futility)

    def restore(self, policy, state: dict):
        policy.load_state_dict(state)
        return policy


class SeqKind(PolicyKind):
    """Seq: uniform sampling without replacement with a betting confidence sequence (Cer-Eval's baseline)."""

    name = "seq"
    worded = True
    family = Family.ESTIMATION
    labels = Labels.CHOSEN
    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> Seq:
        return Seq(inputs.n_items, delta=settings.delta, threshold=settings.alpha, radius=settings.radius,
                   seed=settings.seed, strict=settings.strict)

    def banks(self, radius: str) -> bool:
        return radius == "betting"

    def build_bank(self, settings: PolicySettings, n_items: int, n_runs: int, bet=None) -> SeqBank | None:
        if not self.banks(settings.radius):
            return None
        return SeqBank(n_items, n_runs, delta=settings.delta, threshold=settings.alpha, seed=settings.seed,
                       strict=settings.strict, bet=bet)


class CerEvalKind(PolicyKind):
    """Cer-Eval: adaptive partitions (Algorithm 2) from item embeddings, or strata of the judge's loss."""

    name = "cer-eval"
    worded = True
    family = Family.ESTIMATION
    labels = Labels.CHOSEN
    takes = frozenset({"partition"})
    def judge_use(self, partition: str = "embeddings") -> JudgeUse:
        return JudgeUse.FIRST if partition == "judge" else JudgeUse.NONE

    def needs_features(self, partition: str = "embeddings") -> bool:
        return partition == "embeddings"

    def validate(self, radius: str, partition: str) -> None:
        if partition == "judge" and radius == "paper":
            raise ValueError("policy.partition 'judge' needs radius 'betting' (the paper's Algorithm 2 partitions "
                             "embeddings)")

    def build(self, settings: PolicySettings, inputs: PolicyInputs) -> CerEval:
        if settings.partition == "judge":
            if inputs.judge_scores is None:
                raise ValueError("policy 'cer-eval' with partition 'judge' needs the judge's loss on every item")
            part = ScorePartition(inputs.judge_scores)
        elif settings.partition == "embeddings":
            if inputs.features is None:
                raise ValueError("policy 'cer-eval' needs item features")
            state = int(np.random.default_rng(settings.seed).integers(2**31))
            part = NearestNeighborPartition(inputs.features, random_state=state)
        else:
            raise ValueError(f"unknown partition {settings.partition!r} (embeddings or judge)")
        return CerEval(inputs.n_items, part, delta=settings.delta, threshold=settings.alpha, radius=settings.radius,
                       seed=settings.seed, strict=settings.strict)

    def restore(self, policy, state: dict):
        return CerEval.from_state_dict(state, policy.partitioner)


POLICY_KINDS: Registry[PolicyKind] = Registry("policy.kind", PolicyKind)


def register_policy_kind(kind: PolicyKind | type[PolicyKind]) -> PolicyKind:
    """Add a kind (an instance, or a class with a no-argument constructor) to :data:`POLICY_KINDS` under its ``name``
    (``policy.kind: NAME``). Returns the instance."""
    if isinstance(kind, type) and issubclass(kind, PolicyKind):
        kind = kind()
    if not isinstance(kind, PolicyKind):
        raise TypeError(f"policy.kind: a registered item must subclass PolicyKind, got {kind!r}")
    if not isinstance(getattr(kind, "family", None), Family) or not isinstance(getattr(kind, "labels", None), Labels):
        raise ValueError(f"policy kind {kind.name!r}: family must be a Family and labels a Labels")
    if kind.family is Family.ESTIMATION and kind.labels is Labels.ORDER:
        raise ValueError(f"policy kind {kind.name!r}: an estimation policy chooses its items (Labels.CHOSEN)")
    return POLICY_KINDS.register(kind)


# measured labels to certify over the limit with the default UP prior, mean over the TriviaQA frontier
# (python benchmarks/limit.py --orders 500, docs/results.md 'limit'): R-Eval 1.16 of log(1/delta)/KL_inf;
# R-AutoEval+ (UP, split) 1.15 of the split oracle with r = 3 (1.32 of the PPI floor)
for _name, _eff in (("r-eval", 1.16), ("r-autoeval", None), ("r-autoeval+", 1.15)):
    register_policy_kind(BettingTestKind(_name, SCHEMES[_name], _eff))
for _k in (JudgeStratifiedKind, SeqKind, CerEvalKind):
    register_policy_kind(_k)


def get_policy_kind(kind: str | PolicyKind) -> PolicyKind:
    """The registered kind of a name (a :class:`PolicyKind` is returned as is)."""
    if isinstance(kind, PolicyKind):
        return kind
    return POLICY_KINDS.lookup(kind)


def kinds_of(family: Family) -> list[str]:
    """Names of the registered kinds of one family (for messages)."""
    return [n for n, k in POLICY_KINDS.items() if k.family is family]


__all__ = ["POLICY_KINDS", "Family", "JudgeUse", "Labels", "PolicyInputs", "PolicyKind",
           "PolicySettings", "get_policy_kind", "kinds_of", "register_policy_kind"]
