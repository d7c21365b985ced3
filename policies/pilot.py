"""Where a fixed sequence starts: a judge-only pilot on its own random draws.

A fixed-sequence job (FST) tests its candidates in a pre-set order, heaviest (safest) first, and certifies the longest
passing prefix; the user wants its end, and testing configs far above the frontier spends labels on certificates nobody
needs. The pilot estimates the frontier from the judge alone and the sequence starts a few configs before it
(``margin``, toward the heavier ones):

1. ``m`` pilot items are drawn uniformly without replacement from a random stream of their own (:func:`pilot_items`),
   independent of the item order the tests draw;
2. each config's pilot estimate is its mean judge loss on those items;
3. the estimated frontier ``f`` is the number of leading configs whose estimate is at most alpha; the sequence starts at
   ``max(0, f - 1 - margin)`` (:func:`pilot_start`).

**Why the guarantee is unchanged.** Fixed-sequence testing controls the family-wise error at delta for any order fixed
before the tests' own draws. The start is a function of the pilot's draws and the judge's losses only, and the tests'
draws are independent of the pilot's (a separate stream), so conditionally on the start the order
``start, start + 1, ...`` is fixed and independent of the tests' data, and every statement holds at delta. (On a
recorded table the draws are the only randomness, so the argument is exact there; with fresh draws it holds likewise.)
Configs before the start are not tested, and the certificate says so.

**People check the start** (``check`` human labels, :func:`checked_start`): a judge can put the frontier far past where
it is, and a sequence that starts past its frontier certifies nothing. While the start's mean human loss on the first
``check`` pilot items is above alpha, the start moves back toward the top, 1, 2, 4, ... configs at a time. These labels
are the pilot's own draws too, so the argument above is unchanged.

**When the start fails**, the sequence stops there and nothing is certified (the margin and the check make this rare).
Running again from the top is a second look at the same data and would need its own share of delta.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validation import check_level

# the pilot's random stream: spawned from the job's seed with this key, so that it never
# coincides with the stream of the tests' item order (workers.replay.item_order)
PILOT_STREAM = 0x9170


def pilot_items(n_items: int, m: int, seed: int) -> np.ndarray:
    """``min(m, n_items)`` item indices drawn uniformly without replacement from the pilot's own stream."""
    if m < 1:
        raise ValueError(f"pilot items must be at least 1, got {m}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), PILOT_STREAM]))
    return np.sort(rng.choice(n_items, size=min(int(m), int(n_items)), replace=False))


def pilot_start(judge: np.ndarray, alpha: float, margin: int) -> tuple[int, np.ndarray]:
    """(the start index, each config's pilot estimate) from the judge's losses ``judge`` (K configs in testing order, m
    items)."""
    check_level(alpha, "alpha")
    if margin < 0:
        raise ValueError(f"pilot margin must be at least 0, got {margin}")
    est = np.asarray(judge, dtype=np.float64).mean(axis=1)
    passing = np.cumprod(est <= alpha).astype(bool)  # the leading configs the judge puts within alpha
    frontier = int(passing.sum())  # how many lead the sequence; the frontier is the last of them
    return max(0, frontier - 1 - int(margin)), est


def checked_start(human: np.ndarray, start: int, alpha: float) -> tuple[int, dict[int, float]]:
    """(the start once people checked it, each checked config's mean human loss) from ``human`` (K configs in testing
    order, c check items); a judge that misplaced the frontier by d configs costs about log2(d) checks."""
    check_level(alpha, "alpha")
    checked: dict[int, float] = {}
    step = 1
    while True:
        checked[start] = float(np.mean(human[start]))
        if checked[start] <= alpha or start == 0:
            return start, checked
        start, step = max(0, start - step), 2 * step


@dataclass(frozen=True)
class PilotRun:
    """What the pilot did: the start, the piloted configs' mean judge losses (testing order, up to the first above
    alpha), the items it drew, and the configs people checked (index: mean human loss on the first ``check_items``)."""

    start: int
    estimates: np.ndarray
    items: int
    checked: dict[int, float] = field(default_factory=dict)
    check_items: int = 0

    @property
    def judge_labels(self) -> int:
        return self.items * self.estimates.size

    @property
    def human_labels(self) -> int:
        return self.check_items * len(self.checked)


def run_pilot(judge: np.ndarray, alpha: float, items: int, margin: int, seed: int,
              human: np.ndarray | None = None, check: int = 0) -> PilotRun:
    """The pilot as a job with ``seed`` runs it, on every config's judge losses (K, I) in testing order. It stops at the
    first config it puts above alpha, so only those configs' estimates (and judge labels) are part of it; with ``human``
    (K, I) and ``check`` > 0, people then check the start (:func:`checked_start`)."""
    if check < 0:
        raise ValueError(f"pilot check must be at least 0, got {check}")
    drawn = pilot_items(judge.shape[1], items, seed)
    start, est = pilot_start(judge[:, drawn], alpha, margin)
    beyond = np.flatnonzero(est > alpha)
    piloted = est.size if beyond.size == 0 else int(beyond[0]) + 1
    if human is None or check == 0:
        return PilotRun(start, est[:piloted], int(drawn.size))
    on = drawn[:check]
    start, checked = checked_start(np.asarray(human, dtype=np.float64)[:, on], start, alpha)
    return PilotRun(start, est[:piloted], int(drawn.size), checked, int(on.size))
