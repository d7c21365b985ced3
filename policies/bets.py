"""Every bet in one registry: the betting strategies of a candidate's test and the bets of a ranking's pair tests.

A bet (:class:`Bet`) is an immutable object with a ``name`` and parameters, registered as a class in :data:`BETS`
(:func:`register_bet`) and built per use from a name, a ``{"kind": name, **params}`` mapping or an instance
(:func:`get_bet`). ``uses`` says what it can bet for (:class:`BetUse`): a job file's ``betting:`` takes the
strategies of a test by betting (:class:`~.betting.BettingStrategy`), ``pairwise.bet:`` the bets of a ranking's pair
sequences (:class:`~.pair_bets.PairBet`); one name for another use is the one-line error of an unknown name.
"""

from __future__ import annotations

import enum
from dataclasses import asdict
from typing import ClassVar

from .registry import Registry


class BetUse(enum.Enum):
    """What a bet is for; the value is the job-file key that names one."""

    TEST = "betting"  # a candidate's test of R <= alpha (eq. 6): fractions of wealth
    PAIRS = "pairwise.bet"  # a ranking's pair confidence sequences: sizes for the claims they stop on


class Bet:
    """The registry's base: a name, what it bets for and its parameters (subclasses are frozen dataclasses)."""

    name: ClassVar[str] = ""
    uses: ClassVar[frozenset[BetUse]] = frozenset()

    def params(self) -> dict:
        """The parameters, as plain values (snapshots, MLflow params, equality of configs)."""
        return asdict(self) if hasattr(self, "__dataclass_fields__") else {}

    def spec(self) -> dict:
        """``{"kind": name, **params}``: what :func:`get_bet` turns back into this object."""
        return {"kind": self.name, **self.params()}

    def describe(self) -> str:
        """The name, with the parameters that differ from their defaults: ``up``, ``up(prior=grid)``."""
        defaults = type(self)().params() if hasattr(self, "__dataclass_fields__") else {}
        extra = ", ".join(f"{k}={v}" for k, v in self.params().items() if defaults.get(k, object()) != v)
        return f"{self.name}({extra})" if extra else self.name


BETS: Registry[type[Bet]] = Registry("betting", Bet, classes=True)


def register_bet(cls: type[Bet]) -> type[Bet]:
    """Add a bet class to :data:`BETS` under ``cls.name`` (usable as a decorator); the job-file key of each of its
    ``uses`` then selects it by name."""
    if not cls.uses:
        raise ValueError(f"bet {cls.__name__}: declare what it bets for (uses)")
    return BETS.register(cls)


def bet_names(use: BetUse) -> list[str]:
    """The registered names of the bets for ``use``."""
    return [n for n, cls in BETS.items() if use in cls.uses]


def get_bet(bet, use: BetUse) -> Bet:
    """A bet for ``use`` from a name, a mapping or an instance (returned as is when it serves ``use``). Unknown names,
    names of another use and bad parameters are one-line errors naming the job-file key."""
    if isinstance(bet, Bet):
        if use not in bet.uses:
            raise ValueError(f"{use.value}: {bet.name!r} is not a bet for this ({type(bet).__name__})")
        return bet
    if isinstance(bet, dict):
        params = dict(bet)
        kind = params.pop("kind", None)
    else:
        kind, params = bet, {}
    cls = BETS.lookup(kind, key=use.value, where=lambda c: use in c.uses)
    try:
        return cls(**params)
    except TypeError as err:  # an unknown parameter
        raise ValueError(f"{use.value} {kind!r}: {err}") from None
