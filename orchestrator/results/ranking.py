"""What a pairwise ranking certified (the certificate's ``ranking`` block). Standard library only: ``certsel show``
reads a certificate without importing the engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class TopK:
    """A top-k ranking: the models certified among the ``k`` best, those certified outside them, the rest."""

    k: int
    certified_in: list[str]
    certified_out: list[str]
    undetermined: list[str]


@dataclass(frozen=True)
class Ranking:
    """What a pairwise ranking certified. ``better[a]``: the models ``a`` is certified better than, directly or
    through certified pairs (``better_direct``: by its own pair); these hold together on one event at the job's
    delta. ``order`` and ``score`` (Copeland: certified wins minus losses) only list the models: not certified."""

    better: dict[str, list[str]]
    better_direct: dict[str, list[str]]
    possible_winners: list[str]
    goal: str
    order: list[str]
    score: dict[str, int]
    score_meaning: str
    pairs_certified: int
    pairs_certified_directly: int
    pairs: int
    pair_delta: float  # each pair's level (Bonferroni over the pairs)
    pair_delta_per_direction: float  # each direction of a pair's sign
    items_per_pair: dict[str, int]  # "A vs B": items the pair's policy used
    difference_intervals: dict[str, list[float]]  # "A - B": the interval on R(A) - R(B) of its decisions
    epsilon: float | None = None  # pairwise.epsilon: the tolerance of a certified tie (None: no ties)
    tied: list[str] = dataclasses.field(default_factory=list)  # "A ~ B": |R(A) - R(B)| < epsilon certified
    pairs_tied: int = 0
    # every model's certified [best, worst] rank (1 = lowest risk), all at once on the same event
    rank_intervals: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    # the certified weak order: each group certified better than every later group (by rank intervals)
    rank_groups: list[list[str]] = dataclasses.field(default_factory=list)
    topk: TopK | None = None  # goal topk

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
