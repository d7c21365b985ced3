"""Bet sizes for :class:`~certsel.policies.confseq.BettingCS` tuned to the claim a test is after.

The sequence's default bet (WSR's plug-in) is sized for the width reached, whatever the test wants to decide. A test
that stops on a claim about the mean -- "mu > 1/2" (one model better), "|mu - 1/2| < epsilon/2" (a tie) -- needs its
bounds past the claim's ends, and the margin between mu and those ends decides how soon. For a margin d and conditional
variance v the growth-rate-optimal bet is about d / (v + d^2) (aGRAPA of Waudby-Smith & Ramdas, "Estimating means of
bounded random variables by betting", JRSS-B 2024, arXiv:2010.09686).

:class:`MarginBet` predicts the margin from what is known before each draw (the test's estimate of mu and its standard
error), picks the claim with the widest predicted margin and sizes each gambler's bet for its end of that claim. The
sizes are predictable, non-negative and the same for every candidate mean, all the sequence's guarantee asks
(:mod:`certsel.policies.confseq`): the choice of claim changes how fast the bounds move, never their coverage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .bets import Bet, BetUse, get_bet, register_bet

# The cap c of the margin bet: every capital factor stays >= 1 - c. Above the plug-in's 1/2 because a paired difference
# of two models' losses is mostly 1/2 (both right or both wrong): its variance is far below what its [0, 1] range
# allows, and a cap of 1/2 keeps the bet short of the growth-optimal size for many of a ranking's pairs; much higher, a
# rare extreme draw costs more than the larger bets gain (on AlpacaEval's 66 pairs, 20 shuffles at epsilon 0.05: model
# evaluations 5,750 at 0.5, 5,611 at 0.6, 5,601 at 0.65, 5,699 at 0.75, 5,903 at 0.85).
MARGIN_CAP = 0.65
_SMALLEST_MARGIN = 1e-3


@dataclass(frozen=True)
class MarginBet:
    """Bets sized for the claim among ``claims`` with the widest predicted margin.

    ``claims``: intervals (lo, hi) of the mean the test stops on, ``-inf``/``inf`` for an open end ("mu > 1/2" is (1/2,
    inf)). ``cap``: the sequence's truncation c that goes with these bets.
    """

    claims: tuple[tuple[float, float], ...]
    cap: float = MARGIN_CAP

    def __post_init__(self):
        if not self.claims:
            raise ValueError("a margin bet needs at least one claim")
        for lo, hi in self.claims:
            if not (lo < hi) or math.isnan(lo) or math.isnan(hi) or (math.isinf(lo) and math.isinf(hi)):
                raise ValueError(f"a claim is an interval (lo, hi) with lo < hi and one end finite, got {(lo, hi)}")
        if not 0.0 < float(self.cap) < 1.0:
            raise ValueError(f"cap must be in (0, 1), got {self.cap!r}")

    def sizes(self, mean, stderr, v) -> tuple[np.ndarray, np.ndarray]:
        """(l+, l-), each shaped like ``v`` (B, T): the bets of K+ and K- for draws with predicted variances ``v``,
        given the estimate ``mean`` (B,) and its ``stderr`` (B,), both known before the draws."""
        mean = np.asarray(mean, dtype=np.float64)[:, None]
        lo = np.array([c[0] for c in self.claims])[None, :]
        hi = np.array([c[1] for c in self.claims])[None, :]
        margin = np.minimum(mean - lo, hi - mean)  # (B, claims): the nearer end decides
        best = np.argmax(margin, axis=1)
        lo_end, hi_end = lo[0, best][:, None], hi[0, best][:, None]
        # a margin the estimate cannot resolve yet counts as one standard error
        floor = np.maximum(np.asarray(stderr, dtype=np.float64)[:, None], _SMALLEST_MARGIN)
        d_lo = np.maximum(mean - lo_end, floor)
        d_hi = np.maximum(hi_end - mean, floor)
        # an open end is not part of the decision: its gambler bets as the other end's does
        d_lo = np.where(np.isinf(lo_end), d_hi, d_lo)
        d_hi = np.where(np.isinf(hi_end), d_lo, d_hi)
        v = np.asarray(v, dtype=np.float64)
        return d_lo / (v + d_lo * d_lo), d_hi / (v + d_hi * d_hi)


def pair_claims(epsilon: float | None) -> tuple[tuple[float, float], ...]:
    """The claims of a ranking's pair test on u = (loss_a - loss_b + 1) / 2: an order either way, and with ``epsilon`` a
    tie,
    |R_a - R_b| < epsilon."""
    order = ((0.5, math.inf), (-math.inf, 0.5))
    return order if epsilon is None else order + ((0.5 - epsilon / 2.0, 0.5 + epsilon / 2.0),)


class PairBet(Bet):
    """How a ranking's pair tests bet (``pairwise.bet``, ``CertifiedRanking(bet=)``), a bet of :data:`~.bets.BETS`
    for :attr:`~.bets.BetUse.PAIRS`: :meth:`for_claims` gives the bet for a pair's claims, or None for the pair
    policy's own."""

    uses: ClassVar[frozenset[BetUse]] = frozenset({BetUse.PAIRS})
    sized: ClassVar[bool] = False  # whether it replaces the pair policy's own bet (the policy must take one)

    def for_claims(self, claims) -> MarginBet | None:
        return None


@register_bet
@dataclass(frozen=True)
class Margin(PairBet):
    """Bets sized for the claim with the widest predicted margin (:class:`MarginBet`)."""

    name = "margin"
    sized = True

    def for_claims(self, claims) -> MarginBet:
        return MarginBet(tuple(claims))


@register_bet
@dataclass(frozen=True)
class PlugIn(PairBet):
    """The pair policy's own bet (Seq's: WSR's predictable plug-in)."""

    name = "plug-in"


def pair_bet(name) -> PairBet:
    """The pair bet named ``name`` (one-line error naming ``pairwise.bet`` for an unknown one)."""
    return get_bet(name, BetUse.PAIRS)
