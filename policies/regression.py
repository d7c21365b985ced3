"""Regression against a baseline: certify that a candidate's score is at least a baseline model's minus a margin
(non-inferiority), or above it by a margin (superiority), paired on the same items.

With per-item losses l (a candidate's) and b (the baseline's) in [0, 1] on the same item (a score s is the loss
1 - s), the paired difference d = l - b lies in [-1, 1] and

    u_i = (l_i - b_i + 1) / 2  in [0, 1],
    E[u] <= alpha_m = (1 + m) / 2   <=>   E[l] - E[b] <= m   <=>   E[s] >= E[s_base] - m,

with m = margin for non-inferiority and m = -margin for superiority (E[s] >= E[s_base] + margin). So a regression
test is a risk test on u at alpha_m (:class:`Regression`): every policy, bet and procedure applies unchanged, with the
same guarantee (the betting test is a supermartingale for E[u] >= alpha_m, so P(pass) <= delta whenever the claim is
false, boundary included), and it is paired: the item-to-item variation both models share cancels in d, which an
unpaired comparison of two means (e.g. a z-test on two accuracies) pays for twice.

An upper bound U on E[u] at some level is the lower bound 1 - 2 U on E[s] - E[s_base] at that level
(:meth:`Regression.difference_bound`), >= -m exactly when U <= alpha_m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import check_losses


@dataclass(frozen=True)
class Regression:
    """The claim "score >= baseline's - ``margin``" (``superiority``: "score >= baseline's + ``margin``") as a risk
    test on paired losses (module docstring)."""

    margin: float = 0.0
    superiority: bool = False

    def __post_init__(self):
        m = self.margin
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or not 0.0 <= m < 1.0:
            raise ValueError(f"regression margin must be a number in [0, 1), got {m!r}")

    @property
    def shift(self) -> float:
        """m: the claim is E[l] - E[b] <= m (negative for superiority)."""
        return -float(self.margin) if self.superiority else float(self.margin)

    @property
    def alpha(self) -> float:
        """The risk target (1 + m) / 2 of the equivalent test."""
        return (1.0 + self.shift) / 2.0

    def losses(self, loss, baseline) -> np.ndarray:
        """u = (l - b + 1) / 2 in [0, 1], elementwise (any shape, paired)."""
        ell, b = check_losses(loss, "candidate losses", (0.0, 1.0)), check_losses(baseline, "baseline losses", (0.0, 1.0))
        if ell.shape != b.shape:
            raise ValueError(f"candidate and baseline losses must be paired, got shapes {ell.shape} and {b.shape}")
        return (ell - b + 1.0) / 2.0

    @staticmethod
    def difference_bound(upper):
        """The lower bound 1 - 2 U on E[s] - E[s_base] that an upper bound U on E[u] gives (None stays None); the same
        map takes an estimate of E[u] to one of the difference."""
        if upper is None:
            return None
        return 1.0 - 2.0 * np.asarray(upper, dtype=np.float64) if np.ndim(upper) else 1.0 - 2.0 * float(upper)

    def words(self, baseline: str) -> str:
        """The claim in words: "score >= 'v1.2' - 0.02"."""
        if self.superiority:
            return f"score > {baseline!r}" if self.margin == 0 else f"score >= {baseline!r} + {self.margin:g}"
        return f"score >= {baseline!r}" if self.margin == 0 else f"score >= {baseline!r} - {self.margin:g}"

    def opposite_words(self, baseline: str) -> str:
        """What a fail certifies, in words."""
        if self.superiority:
            return f"score <= {baseline!r}" if self.margin == 0 else f"score <= {baseline!r} + {self.margin:g}"
        return f"score < {baseline!r}" if self.margin == 0 else f"score <= {baseline!r} - {self.margin:g}"
