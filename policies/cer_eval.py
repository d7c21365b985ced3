"""Certified estimation of a model's mean loss: Base, Seq (Algorithm 3) and Cer-Eval (Algorithm 1).

All three estimate R, the mean loss in [0, 1] of a model over the ``n_items`` items of a test set, label items one at a
time (or in batches) and stop when the confidence interval's half-width is <= ``epsilon``, when a one-sided bound
settles a ``threshold`` (the "is R above c?" decision of section 3), or when the test set is exhausted. They share one
state-machine interface:

    policy = CerEval(n_items, NearestNeighborPartition(embeddings), epsilon=0.05, delta=0.05)
    while not policy.done:
        items = policy.next_items(16)          # which items to label next
        policy.update(items, losses_of(items))  # the labels, in any batch size and order
    policy.estimate, policy.ci, policy.n_labeled

``state_dict()`` / ``from_state_dict()`` snapshot everything, the random generator included, so a restored policy makes
exactly the choices the original would have made.

Guarantee (``radius="betting"``, the default; docs/cer_eval.md, "What the certificate says"). Seq and Cer-Eval draw
items without replacement through the stratified design of :mod:`certsel.policies.stratified` (Seq with one group,
Cer-Eval with its partitioner's groups, refitted on the schedule of Algorithm 2) and keep one betting confidence
sequence on its observations (:mod:`certsel.policies.confseq`). With probability at least 1 - delta the interval ``ci``
contains R at every step (each end at delta/2); separately, ``lower_bound`` <= R and R <= ``upper_bound`` at every step,
each at the full delta, and ``decision`` (-1: R <= threshold, +1: R >= threshold) is false with probability at most
delta. This holds for any partition refitted from past labels, under optional stopping, and for batches returned in any
order; with every item labelled the interval is R.

``radius="paper"`` runs the paper's closed-form radii instead (:mod:`certsel.policies.paper_radii`): exact for Seq and
for a fixed partition, not for a partition fitted to the labels.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import check_positive_int
from .paper_radii import PaperEngine, next_refit
from .partition import FixedPartition, Partitioner
from .radius import hoeffding_radius
from .strata import DEFAULT_FLOOR
from .stratified import StratifiedBetting

from .estimation import EstimationPolicy, _check_radius


class Base(EstimationPolicy):
    """Static evaluation: label every item, then report the mean with a Hoeffding radius.

    The radius is the two-sided sqrt(ln(2/delta) / (2n)) (:func:`hoeffding_radius`); the paper's reference level
    :func:`epsilon_star` is the one-sided version. Before all items are labelled the interval is [0, 1]: a fixed-n bound
    says nothing earlier.
    """

    name = "base"

    def __init__(self, n_items, *, delta, epsilon=None, threshold=None, seed=None, strict=False):
        super().__init__(n_items, delta=delta, epsilon=epsilon, threshold=threshold, seed=seed, strict=strict)
        self._order = self._rng.permutation(self.n_items)
        self._next = 0

    def bounds(self):
        if not self.exhausted:
            return (0.0, 1.0, 0.0, 1.0)
        m = float(np.mean(self._losses))
        r = float(hoeffding_radius(self.n_items, self.delta))
        lo, hi = max(m - r, 0.0), min(m + r, 1.0)
        return (lo, hi, lo, hi)

    def _choose(self, batch):
        out = self._order[self._next:self._next + batch].tolist()
        self._next += len(out)
        return out

    def _observe(self, items, losses):
        pass

    def group_stats(self) -> dict:
        """The same keys as the stratified policies, for one group (the whole test set)."""
        z = self.labeled_losses
        lo, hi = self.ci
        return {
            "size": np.array([self.n_items]),
            "labeled": np.array([z.size]),
            "mean": np.array([z.mean() if z.size else np.nan]),
            "variance": np.array([z.var() if z.size else np.nan]),
            "center": np.array([0.5 * (lo + hi)]),
            "radius": np.array([0.5 * (hi - lo)]),
        }

    def state_dict(self) -> dict:
        s = self._base_state()
        s.update(order=self._order.tolist(), next=self._next)
        return s

    @classmethod
    def from_state_dict(cls, state: dict) -> Base:
        p = cls(state["n_items"], delta=state["delta"], epsilon=state["epsilon"], threshold=state["threshold"])
        p._restore_base(state)
        p._order = np.asarray(state["order"], dtype=np.int64)
        p._next = int(state["next"])
        return p


class _Engined(EstimationPolicy):
    """Seq and Cer-Eval: the item bookkeeping here, the statistics in an engine (:class:`StratifiedBetting` for
    ``radius="betting"``, :class:`PaperEngine` for "paper")."""

    def _make_engine(self, radius: str, paper_kind: str, floor: float):
        self.radius_kind = _check_radius(radius)
        if radius == "paper":
            self._engine = PaperEngine(self.n_items, paper_kind, delta=self.delta, rng=self._rng)
        else:
            # tune the bets for what stops the policy: a one-sided bound with a threshold
            bet = self.delta if self.threshold is not None else self.delta / 2.0
            self._engine = StratifiedBetting(self.n_items, delta=self.delta, rng=self._rng, floor=floor,
                                             bet_level=bet)

    @property
    def betting(self) -> bool:
        return self.radius_kind == "betting"

    def bounds(self):
        if self.betting:
            return self._engine.bounds()
        lo, hi = self._engine.interval()
        return (lo, hi, lo, hi)

    @property
    def n_groups(self) -> int:
        return self._engine.K

    def group_stats(self) -> dict:
        """Per-group size, labels, mean and variance, plus the engine's own columns (betting: pool, allocation, control,
        spread; paper: interval center and radius)."""
        return self._engine.group_stats()

    def _observe(self, items, losses):
        self._engine.observe(items, losses)

    def _engine_state(self) -> dict:
        s = self._base_state()
        s.update(radius=self.radius_kind, engine=self._engine.state_dict())
        return s


class Seq(_Engined):
    """Algorithm 3: label uniformly random items until the radius is at most epsilon.

    ``radius="betting"``: sampling without replacement with one betting confidence sequence on the test-set mean (one
    group of :mod:`certsel.policies.stratified`); ``"paper"``: the adaptive Hoeffding radius of Lemma B.3 on a random
    order.
    """

    name = "seq"

    def __init__(self, n_items, *, delta, epsilon=None, threshold=None, radius="betting", seed=None, strict=False):
        super().__init__(n_items, delta=delta, epsilon=epsilon, threshold=threshold, seed=seed, strict=strict)
        self._make_engine(radius, "hoeffding", DEFAULT_FLOOR)

    def _choose(self, batch):
        if self.betting:
            return self._engine.choose(batch)
        return self._engine.take_uniform(batch)

    def state_dict(self) -> dict:
        return self._engine_state()

    @classmethod
    def from_state_dict(cls, state: dict) -> Seq:
        p = cls(state["n_items"], delta=state["delta"], epsilon=state["epsilon"], threshold=state["threshold"],
                radius=state["radius"])
        p._restore_base(state)
        p._engine.load_state_dict(state["engine"])
        return p


class CerEval(_Engined):
    """Algorithm 1: adaptive partition, allocation to the groups that vary most, one certificate.

    * partitioner: :class:`NearestNeighborPartition` (Algorithm 2, adaptive), :class:`ScorePartition` (judge-score
      strata), :class:`FixedPartition` / :func:`score_partition` (fixed), or anything with a ``partition`` method.
    * radius: ``"betting"`` (the exactly valid stratified betting sequence, default) or ``"paper"`` (Algorithm 1 lines
      10-11 with the union bound over groups).
    * warm_start: m, the number of uniformly random items labelled before the first partition.
    * schedule: (a, beta): an adaptive partition is refitted when the label count first reaches a * beta^t, t = 1, 2,
      ... (section 6.2), so O(log N) refits; beta just above 1 refits after every label. ``a`` defaults to
      ``warm_start``.
    * floor: with ``radius="betting"``, every group with items left is drawn with probability at least ``floor`` times
      its share of the remaining items.
    * seed: the generator behind the draws, the warm start and the training subsets.
    """

    name = "cer-eval"

    def __init__(self, n_items, partitioner: Partitioner, *, delta, epsilon=None, threshold=None,
                 radius="betting", warm_start: int = 50, schedule=(None, 1.25), floor: float = DEFAULT_FLOOR,
                 seed=None, strict=False):
        super().__init__(n_items, delta=delta, epsilon=epsilon, threshold=threshold, seed=seed, strict=strict)
        if getattr(partitioner, "n_items", None) != self.n_items:
            raise ValueError(
                f"partitioner covers {getattr(partitioner, 'n_items', None)} items but n_items is {self.n_items}"
            )
        self.partitioner = partitioner
        self.warm_start = min(check_positive_int(warm_start, "warm_start"), self.n_items)
        try:
            a, beta = schedule
        except (TypeError, ValueError):
            raise ValueError(f"schedule must be a pair (a, beta), got {schedule!r}") from None
        a = self.warm_start if a is None else a
        if not (isinstance(a, (int, float)) and math.isfinite(a) and a >= 1):
            raise ValueError(f"schedule a must be a number >= 1, got {a!r}")
        if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 1):
            raise ValueError(f"schedule beta must be a number > 1, got {beta!r}")
        self.schedule = (float(a), float(beta))
        try:
            floor = float(floor)
        except (TypeError, ValueError):
            raise ValueError(f"floor must be a number in (0, 1], got {floor!r}") from None
        if not 0.0 < floor <= 1.0:
            raise ValueError(f"floor must be in (0, 1], got {floor!r}")
        self._make_engine(radius, "bernstein", floor)
        self._partitions = 0  # number of partitions fitted so far
        self._next_refit = self.warm_start
        if self.betting and not partitioner.adaptive:
            # a partition known before any label needs no warm start: stratify from the first draw
            self._repartition()

    def _score(self, groups, groups_of_labeled, K) -> float:
        """The criterion a partitioner minimises over its candidate partitions."""
        if self.betting:
            return self._engine.score(groups, self._status)
        return self._engine.radius_of(self.labeled_losses, groups, groups_of_labeled, K)

    def _partition_call(self):
        if self.betting:
            return self.partitioner.partition
        # the paper's Algorithm 2 groups labelled items by their own losses; see paper_radii
        return getattr(self.partitioner, "paper_partition", self.partitioner.partition)

    def _repartition(self):
        items, losses = self.labeled_items, self.labeled_losses
        if self.betting:  # in the order drawn: a refit must not depend on the order labels came back in
            order = np.argsort(self._engine.draw_rank(items), kind="stable")
            items, losses = items[order], losses[order]
        groups = np.asarray(self._partition_call()(items, losses, self._score, self._rng))
        if groups.shape != (self.n_items,) or groups.dtype.kind not in "iu" or groups.min() < 0:
            raise ValueError("partitioner must return one non-negative integer group per item")
        if groups.max() >= self.n_items:
            raise ValueError(f"partitioner returned group id {int(groups.max())}: ids must be below n_items "
                             f"({self.n_items})")
        groups = groups.astype(np.int64)
        if self.betting:
            self._engine.set_partition(groups, self._status)
        else:
            self._engine.set_partition(groups, self.labeled_items, self.labeled_losses, self._status)
        self._partitions += 1
        self._next_refit = next_refit(self.schedule, self.n_labeled) if self.partitioner.adaptive else math.inf

    def _choose(self, batch):
        issued = self.n_labeled + len(self._pending)
        if self._partitions == 0 and issued < self.warm_start:  # uniform items: the engine has one group
            take = min(batch, self.warm_start - issued)
            return self._engine.choose(take) if self.betting else self._engine.take_uniform(take)
        if self.n_labeled >= self._next_refit:
            self._repartition()
        if self.betting:
            return self._engine.choose(batch)
        return self._engine.choose(batch, self.pending_items)

    @property
    def n_partitions(self) -> int:
        return self._partitions

    def state_dict(self) -> dict:
        s = self._engine_state()
        s.update(warm_start=self.warm_start, schedule=list(self.schedule), floor=self._floor(),
                 partitions=self._partitions, next_refit=self._next_refit,
                 partitioner_items=self.partitioner.n_items)
        return s

    def _floor(self) -> float:
        return self._engine.floor if self.betting else DEFAULT_FLOOR

    @classmethod
    def from_state_dict(cls, state: dict, partitioner: Partitioner) -> CerEval:
        """Restore a snapshot; ``partitioner`` must be the one the policy was built with."""
        if state.get("partitioner_items") != getattr(partitioner, "n_items", None):
            raise ValueError("partitioner does not match the snapshot (different number of items)")
        p = cls(state["n_items"], partitioner, delta=state["delta"], epsilon=state["epsilon"],
                threshold=state["threshold"], radius=state["radius"], warm_start=state["warm_start"],
                schedule=tuple(state["schedule"]), floor=state["floor"])
        p._restore_base(state)
        p._engine.load_state_dict(state["engine"])
        p._partitions = int(state["partitions"])
        p._next_refit = state["next_refit"]
        return p


def oracle(n_items, groups, **kwargs) -> CerEval:
    """Cer-Eval with the true partition (the "Oracle" of section 6.1)."""
    return CerEval(n_items, FixedPartition(groups), **kwargs)
