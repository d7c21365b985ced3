"""Where a fixed sequence starts: a judge-only pilot on its own random draws.

A fixed-sequence job (FST) tests its candidates in a pre-set order, heaviest (safest) first,
and certifies the longest passing prefix; the user wants the end of that prefix. Testing
the configs far above the frontier spends labels on certificates nobody needs. The pilot
estimates the frontier from the judge alone and the sequence starts a few configs before
it (``margin``, toward the heavier ones):

1. ``m`` pilot items are drawn uniformly without replacement with a random stream of their
   own (:func:`pilot_items`), independent of the item order the tests draw;
2. each config's pilot estimate is its mean judge loss on those items;
3. the estimated frontier ``f`` is the number of leading configs whose estimate is at most
   alpha; the sequence starts at ``max(0, f - 1 - margin)`` (:func:`pilot_start`).

**Why the guarantee is unchanged.** Fixed-sequence testing controls the family-wise error
at delta for any order fixed before the tests' own draws. The start is a function of the
pilot's draws and the judge's losses only; the tests' draws are independent of the pilot's
(a separate random stream), so conditionally on the start the order ``start, start + 1,
...`` is fixed and independent of the tests' data, and every statement holds at delta as
for any fixed order. On a recorded table the losses are fixed numbers and the draws are the
only randomness, so the argument is exact there; with fresh draws it holds likewise. The
configs before the start are not tested: the certificate says so and makes no statement
about them.

**When the start fails** (its test does not pass), the sequence stops there, as any fixed
sequence does, and nothing is certified: the margin makes this rare when the judge is close
to the human labels. Running the job again from the top is a second look at the same data
and would need its own share of delta.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_level

# the pilot's random stream: spawned from the job's seed with this key, so that it never
# coincides with the stream of the tests' item order (workers.replay.item_order)
PILOT_STREAM = 0x9170


def pilot_items(n_items: int, m: int, seed: int) -> np.ndarray:
    """``min(m, n_items)`` item indices drawn uniformly without replacement from the pilot's
    own stream (independent of the tests' item order)."""
    if m < 1:
        raise ValueError(f"pilot items must be at least 1, got {m}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), PILOT_STREAM]))
    return np.sort(rng.choice(n_items, size=min(int(m), int(n_items)), replace=False))


def pilot_start(judge: np.ndarray, alpha: float, margin: int) -> tuple[int, np.ndarray]:
    """(the index the sequence starts at, each config's pilot estimate) from the judge's
    losses on the pilot items, ``judge`` (K configs in testing order, m items)."""
    check_level(alpha, "alpha")
    if margin < 0:
        raise ValueError(f"pilot margin must be at least 0, got {margin}")
    est = np.asarray(judge, dtype=np.float64).mean(axis=1)
    passing = np.cumprod(est <= alpha).astype(bool)  # the leading configs the judge puts within alpha
    frontier = int(passing.sum())  # how many lead the sequence; the frontier is the last of them
    return max(0, frontier - 1 - int(margin)), est


def run_pilot(judge: np.ndarray, alpha: float, items: int, margin: int, seed: int) -> tuple[int, np.ndarray, int]:
    """The pilot as a job with ``seed`` runs it, on the judge's losses of every config (K, I)
    in testing order: (the start, the piloted configs' estimates, the pilot items drawn). The
    pilot goes down the sequence and stops at the first config it puts above alpha, so only
    those configs' estimates (and judge labels) are part of it."""
    drawn = pilot_items(judge.shape[1], items, seed)
    start, est = pilot_start(judge[:, drawn], alpha, margin)
    beyond = np.flatnonzero(est > alpha)
    piloted = est.size if beyond.size == 0 else int(beyond[0]) + 1
    return start, est[:piloted], int(drawn.size)
