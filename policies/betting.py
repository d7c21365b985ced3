"""Betting strategies for testing by betting (App. C of R-AutoEval+), as objects in a registry.

A strategy (:class:`BettingStrategy`) turns observation rows ``(rows, n)`` (one row per replication, candidate and
reliance factor; the last axis is time) into per-step log wealth factors. A row's bet at time i looks only at that row's
observations 1..i-1 (predictability), which makes the wealth a test supermartingale under H0: R >= alpha, and so an
e-process that may be stopped and inspected at any time (Ville's inequality). The strategy's running state
(:class:`BettingState`) can be checkpointed, resumed and stacked.

Bets are ``lambda_i = scale * u_i`` with ``u_i`` in [0, 1) and ``scale = 1 / (M - alpha)`` for testing (eq. 6) or
``1 / (M - m)`` for confidence intervals (App. D.5: for UP and WSR the bet then does not depend on alpha, so the wealth
is monotone in alpha and the confidence set an interval).

The strategies are bets in :data:`~.bets.BETS`: ``up`` (:class:`UP`, eq. 19; its priors in :mod:`.up_priors`), ``wsr``
(:class:`WSR`, eq. 20-21) and ``ons`` (:class:`ONS`, online Newton step). :func:`register_strategy` adds one;
:func:`get_strategy` resolves a name, a ``{"kind": name, **params}`` mapping or an instance. Measurements:
docs/statistics.md, "Bets".
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .bets import Bet, BetUse, get_bet, register_bet
from .up_priors import (CAP_NODE, DEFAULT_CAP_MASS, UP_PRIORS, UPPrior,  # noqa: F401  (re-exported)
                        alternatives_prior, up_prior)

# Rows of the universal-portfolio wealth processed together: keeps the (rows, nodes) working set in the L2 cache.
_UP_CHUNK_ELEMENTS = 1 << 16
# The node wealth is renormalised at most every this many steps, more often when it may grow fast (_renormalise_every).
_UP_RENORMALISE_MAX = 64
_UP_FLUSH = 1e-200
# Worker threads for independent row blocks (CERTSEL_THREADS overrides; 1 disables).
_THREADS = int(os.environ.get("CERTSEL_THREADS", os.cpu_count() or 1))


@dataclass(frozen=True)
class BetContext:
    """What a strategy may know of each row before its first observation, from the test (never from the data).

    ``theta`` (rows,): the test's target in the loss range, (alpha - lo) / (hi - lo); ``controlled`` (rows,): whether
    the row's observation subtracts a judge control (reliance factor or control scale above 0), so that its worst
    outcome needs the judge to miss a loss the humans see. Read by strategies with ``takes_context``; this package
    always passes one.
    """

    theta: np.ndarray
    controlled: np.ndarray

    @classmethod
    def of(cls, rows: int, theta=0.5, controlled=False) -> "BetContext":
        """A context of ``rows`` rows, broadcasting ``theta`` and ``controlled``."""
        t = np.broadcast_to(np.asarray(theta, dtype=np.float64), (rows,)).copy()
        c = np.broadcast_to(np.asarray(controlled, dtype=bool), (rows,)).copy()
        return cls(t, c)


@dataclass
class BettingState:
    """What the bets of a batch of rows depend on, so that a process can be resumed exactly.

    ``count`` observations consumed (the same for every row); ``arrays``: the strategy's running quantities, one leading
    entry per row (WSR: running sums of eq. 21; UP: the normalised wealth of every prior node; ONS: the current fraction
    and the sum of squared gradients). Rows are independent, so states stack and split along that axis.
    """

    count: int = 0
    arrays: dict = field(default_factory=dict)

    def get(self, key: str, rows: int, init) -> np.ndarray:
        """The running quantity ``key``, or ``init`` broadcast to ``rows`` before any observation."""
        have = self.arrays.get(key)
        if have is not None:
            return have
        return np.broadcast_to(np.asarray(init, dtype=np.float64), (rows,) + np.shape(init)).copy()

    @staticmethod
    def stack(states) -> "BettingState":
        states = list(states)
        keys = set(states[0].arrays)
        if any(s.count != states[0].count or set(s.arrays) != keys for s in states):
            raise ValueError("only states of one strategy after the same number of observations stack")
        return BettingState(states[0].count, {k: np.concatenate([s.arrays[k] for s in states]) for k in sorted(keys)})

    def split(self, parts: int) -> list["BettingState"]:
        """``parts`` states of equal row counts (the inverse of :meth:`stack`)."""
        out = [BettingState(self.count, {}) for _ in range(parts)]
        for k, a in self.arrays.items():
            for i, piece in enumerate(np.split(a, parts)):
                out[i].arrays[k] = piece.copy()
        return out

    def to_dict(self) -> dict:
        return {"count": self.count, **{k: v.copy() for k, v in self.arrays.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "BettingState":
        return cls(int(d["count"]), {k: np.array(v, dtype=np.float64) for k, v in d.items() if k != "count"})


def _wsr(q, scale, state: BettingState, *, delta, horizon, c, mu0, var0):
    """WSR bets for the next q.shape[-1] rounds after ``state``; returns (lambda, state')."""
    n = q.shape[-1]
    sum_q = state.get("sum_q", q.shape[0], 0.0)
    sum_dev = state.get("sum_dev", q.shape[0], 0.0)
    j = state.count + np.arange(1, n + 1, dtype=np.float64)  # global round index
    mu = (mu0 + sum_q[:, None] + np.cumsum(q, axis=-1)) / (j + 1.0)  # mu_j
    dev = np.cumsum((q - mu) ** 2, axis=-1)
    # sigma2_{j-1} uses squared deviations of rounds 1..j-1
    past = np.concatenate([sum_dev[:, None], sum_dev[:, None] + dev[:, :-1]], axis=-1)
    sigma2 = (var0 + past) / j
    lam = np.minimum(c * scale[:, None], np.sqrt(2.0 * np.log(1.0 / delta) / (horizon * sigma2)))
    new = BettingState(state.count + n, {"sum_q": sum_q + q.sum(axis=-1), "sum_dev": sum_dev + dev[:, -1]})
    return lam, new


def up_fractions(x: np.ndarray, scale: np.ndarray, prior: UPPrior, wealth0: np.ndarray | None = None):
    """Universal Portfolio bet fractions u_i for observations ``x = q - alpha``, eq. (19).

    ``u_i = sum_k w_k u_k E_{i-1}(scale u_k) / sum_k w_k E_{i-1}(scale u_k)``: the prior's posterior mean weighted by
    the wealth each constant bet would have made. ``x`` is (rows, n), or (rows, n, F) for F factors sharing each step's
    bet (the split observation): each node's wealth then moves by prod_f (1 - u_k y_f). ``wealth0`` (rows, K) resumes
    from a previous call. Returns the fractions (rows, n) and the final normalised node wealth (rows, K).
    """
    x = x if x.ndim == 3 else x[..., None]  # (rows, n, F): F factors share each step's bet
    rows, n, F = x.shape
    nodes, weights = prior.nodes, prior.weights
    K = nodes.size
    every = _renormalise_every(x.sum(axis=-1), scale, nodes.max()) if F == 1 else \
        max(1, _renormalise_every(x.reshape(rows, n * F), scale, nodes.max()) // F)
    both = np.stack([nodes, np.ones(K)], axis=1)  # (K, 2): numerator and denominator
    # factor matrix 1 - y_r u_k as a rank-2 product [1, y] @ [[1], [-u]]: one BLAS call
    affine = np.stack([np.ones(K), -nodes], axis=0)  # (2, K)
    out = np.empty((rows, n))
    final = np.empty((rows, K))
    block = max(1, _UP_CHUNK_ELEMENTS // K)

    def run_block(start: int) -> None:
        stop = min(rows, start + block)
        y = scale[start:stop, None, None] * x[start:stop]  # (r, n, F): lambda_i (q_i - alpha) = u_i y_i
        # (n, F, r, 2): step i's [1, y] pairs are contiguous
        ys = np.stack([np.ones((n, F, stop - start)), y.transpose(1, 2, 0)], axis=3)
        if wealth0 is None:
            wealth = np.repeat(weights[None, :], stop - start, axis=0)
        else:
            wealth = wealth0[start:stop].copy()
        factor = np.empty_like(wealth)
        sums = np.empty((stop - start, 2))
        u = np.empty((n, stop - start))  # the bet fractions u_i, time-major
        for i in range(n):
            np.matmul(wealth, both, out=sums)
            np.divide(sums[:, 0], sums[:, 1], out=u[i])
            for f in range(F):  # every factor of the step, with the same node fraction
                np.matmul(ys[i, f], affine, out=factor)
                wealth *= factor
            if i % every == every - 1:
                wealth /= wealth.sum(axis=1, keepdims=True)
                # shares below 1e-200 of the total are zeroed: the bets stay predictable (so valid) and the
                # arithmetic stays out of slow subnormal numbers
                np.putmask(wealth, wealth < _UP_FLUSH, 0.0)
        out[start:stop] = u.T
        np.divide(wealth, wealth.sum(axis=1, keepdims=True), out=final[start:stop])

    starts = range(0, rows, block)
    if len(starts) > 1 and _THREADS > 1:
        # numpy releases the GIL inside these array operations, so blocks run in parallel
        with ThreadPoolExecutor(max_workers=_THREADS) as pool:
            list(pool.map(run_block, starts))
    else:
        for start in starts:
            run_block(start)
    return out, final


def _renormalise_every(x: np.ndarray, scale: np.ndarray, u_max: float) -> int:
    """Steps between renormalisations of the node wealth.

    With y = scale * x, a node's factor 1 - u y lies in [f, g], g = 1 + max(0, -min y), f = 1 - u_max max(0, max y) > 0;
    k steps keep both g**k and f**-k within 1e250.
    """
    y = scale[:, None] * x
    g = 1.0 + max(0.0, float(-y.min()))
    f = 1.0 - u_max * max(0.0, float(y.max()))
    worst = max(np.log10(g), -np.log10(f), 1e-12)
    return int(np.clip(250.0 / worst, 1, _UP_RENORMALISE_MAX))


# -- strategies ---------------------------------------------------------------------------


def bet_log_factors(u: np.ndarray, q: np.ndarray, alpha: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """log(1 - lambda_i (q_i - alpha)), lambda_i = scale u_i, for rows (rows, n): the one formula every strategy's
    wealth is made of (eq. 6). With ``q`` (rows, n, F), F factors share each bet and the log factors are summed over
    f."""
    if q.ndim == 3:
        with np.errstate(divide="ignore"):
            return np.log1p(-u[..., None] * (scale[:, None, None] * (q - alpha[:, None, None]))).sum(axis=-1)
    with np.errstate(divide="ignore"):  # a factor of exactly 0 (u = 1 at the worst outcome) is log 0
        return np.log1p(-u * (scale[:, None] * (q - alpha[:, None])))


class BettingStrategy(Bet):
    """How the bets lambda_i = scale * u_i, u_i in [0, 1], are chosen from past observations.

    A strategy is a small immutable object with one method to write, :meth:`fractions`, resuming from and returning a
    :class:`BettingState`. The bet at step i may use observations 1..i-1 only: that keeps prod_i (1 - scale u_i
    (q_i - alpha)) a test supermartingale under H0 (each factor has conditional mean <= 1 when E[q] >= alpha and
    u >= 0). Everything else is built on the fractions: the log wealth (:meth:`log_factors`) and the one-sided bound
    that inverts the test (:func:`~certsel.policies.bounds.inverted_upper_bound`), which re-uses the fractions that
    decided, so bound and certificate agree for every strategy, a user's included. Subclasses are frozen dataclasses
    (fields = parameters) registered in :data:`~.bets.BETS` under ``name``.
    """

    uses: ClassVar[frozenset[BetUse]] = frozenset({BetUse.TEST})
    # Whether the wealth at a target a (bets scaled by 1/(M - a) or the range, observations centred at a) is
    # non-decreasing in a: true for mixtures of constant bets (UP) and bets computed from the observations alone (WSR).
    # Only then is the rejected set an interval a search may bisect (two-sided intervals invert the strategy's own
    # tests; one-sided bounds above alpha re-choose the bets per target). False, the safe default: intervals come from
    # :meth:`interval_strategy`, one-sided bounds from the test's own fractions. Declaring True requires it to hold.
    monotone_in_target: ClassVar[bool] = False
    # Whether the wealth is a fixed mixture of constant-fraction wealths (UP): then the test at target a with factors
    # 1 - u (q - a)/(M - a) is non-decreasing in a however the observations are presented (normalised ones included).
    constant_bet_mixture: ClassVar[bool] = False
    # Whether :meth:`fractions` takes a factor axis (rows, n, F) sharing each bet; else it sees their capped sum.
    takes_factors: ClassVar[bool] = False
    # Whether :meth:`fractions` takes ``context=`` (a :class:`BetContext`, or None).
    takes_context: ClassVar[bool] = False

    def fractions(self, q: np.ndarray, alpha: np.ndarray, scale: np.ndarray, state: BettingState, *,
                  delta: float, horizon: int) -> tuple[np.ndarray, BettingState]:
        """Bet fractions u (rows, n) in [0, 1] for ``q`` (rows, n), targets ``alpha`` and scales ``scale`` (rows,),
        after ``state``; and the state after them. The bet at step i is ``scale * u_i`` and may use steps before i
        only."""
        raise NotImplementedError

    def log_factors(self, q: np.ndarray, alpha: np.ndarray, scale: np.ndarray, state: BettingState, *,
                    delta: float, horizon: int, context: BetContext | None = None) -> tuple[np.ndarray, BettingState]:
        """Increments log(1 - scale u_i (q_i - alpha)) (rows, n) and the state after them."""
        u, new = self.checked_fractions(q, alpha, scale, state, delta=delta, horizon=horizon, context=context)
        return bet_log_factors(u, q, alpha, scale), new

    def checked_fractions(self, q, alpha, scale, state, *, delta, horizon,
                          context: BetContext | None = None) -> tuple[np.ndarray, BettingState]:
        """:meth:`fractions`, checked: one fraction per step, each in [0, 1] (a larger one could make a factor negative,
        a negative one bets for H0). Factor-axis observations (rows, n, F) reach a strategy without
        :attr:`takes_factors` as one learning signal per step, the sum of the scaled factors capped at 1; the wealth
        still multiplies the factors."""
        steps = q.shape[:2]
        if q.ndim == 3 and not self.takes_factors:
            y = np.minimum((scale[:, None, None] * (q - alpha[:, None, None])).sum(axis=-1), 1.0)
            q = alpha[:, None] + y / scale[:, None]
        extra = {"context": context} if self.takes_context else {}
        u, new = self.fractions(q, alpha, scale, state, delta=delta, horizon=horizon, **extra)
        u = np.asarray(u, dtype=np.float64)
        if u.shape != steps:
            raise ValueError(f"betting {self.name!r} returned fractions of shape {u.shape} for {steps} steps")
        if not np.all((u >= 0.0) & (u <= 1.0)):  # also false for NaN
            raise ValueError(f"betting {self.name!r} returned bet fractions outside [0, 1]")
        return u, new

    def interval_strategy(self) -> "BettingStrategy":
        """The strategy whose e-processes give this one's two-sided intervals: itself when :attr:`monotone_in_target`,
        else the exact Universal Portfolio (eq. 19)."""
        return self if self.monotone_in_target else UP(prior="exact")


def _unit(value, name: str, *, closed_high: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    ok = 0.0 < v <= 1.0 if closed_high else 0.0 < v < 1.0
    if not ok:
        raise ValueError(f"{name} must be in (0, 1{']' if closed_high else ')'}, got {value!r}")
    return v


@dataclass(frozen=True)
class UP(BettingStrategy):
    """Universal Portfolio bets (eq. 19): the wealth is the prior's mixture of constant-bet wealths.

    ``prior="alternatives"`` (default, :func:`alternatives_prior`): Jeffreys' prior over the Bernoulli alternatives
    below the row's target (``context.theta``) that the horizon can certify at ``delta``, and on judge-controlled rows
    (``context.controlled``) ``cap_mass`` at 95% of the largest bet, where the log-optimal bet sits when the judge is
    good. ``"exact"`` (Gauss-Chebyshev) and ``"grid"`` (``grid`` cells) are the paper's Beta(1/2, 1/2) prior and ignore
    the context. Without a context a row is uncontrolled with theta = 1/2, so the prior is the same at every target.
    """

    name: ClassVar[str] = "up"
    monotone_in_target: ClassVar[bool] = True
    constant_bet_mixture: ClassVar[bool] = True
    takes_factors: ClassVar[bool] = True
    takes_context: ClassVar[bool] = True
    prior: str = "alternatives"
    grid: int = 10_000
    cap_mass: float = DEFAULT_CAP_MASS

    def __post_init__(self):
        if self.prior not in UP_PRIORS:
            raise ValueError(f"up prior must be one of {UP_PRIORS}, got {self.prior!r}")
        if isinstance(self.grid, bool) or not isinstance(self.grid, (int, np.integer)) or self.grid < 2:
            raise ValueError(f"up grid must be an integer >= 2, got {self.grid!r}")
        if isinstance(self.cap_mass, bool) or not isinstance(self.cap_mass, (int, float)) \
                or not 0.0 <= self.cap_mass < 1.0:
            raise ValueError(f"up cap_mass must be a number in [0, 1), got {self.cap_mass!r}")

    def fractions(self, q, alpha, scale, state, *, delta, horizon, context=None):
        x = q - (alpha[:, None, None] if q.ndim == 3 else alpha[:, None])
        wealth0 = state.arrays.get("wealth")
        if self.prior != "alternatives":
            u, wealth = up_fractions(x, scale, up_prior(self.prior, horizon=horizon, size=self.grid), wealth0)
            return u, BettingState(state.count + q.shape[1], {"wealth": wealth})
        ctx = BetContext.of(q.shape[0]) if context is None else context
        # rows with one (theta, controlled) share a prior: one vectorised pass per group (a test has a few)
        keys = np.stack([ctx.theta, ctx.controlled.astype(np.float64)], axis=1)
        groups, which = np.unique(keys, axis=0, return_inverse=True)
        u = np.empty(q.shape[:2])
        wealth = None
        for g, (theta, controlled) in enumerate(groups):
            rows = np.flatnonzero(which.reshape(-1) == g)
            prior = alternatives_prior(theta, horizon=horizon, cap_mass=self.cap_mass if controlled else 0.0,
                                       delta=delta)
            u[rows], w = up_fractions(x[rows], scale[rows], prior, None if wealth0 is None else wealth0[rows])
            if wealth is None:
                wealth = np.empty((q.shape[0], w.shape[1]))
            wealth[rows] = w
        return u, BettingState(state.count + q.shape[1], {"wealth": wealth})

    def interval_strategy(self) -> "BettingStrategy":
        """Two-sided intervals bisect over targets, so their prior must not move with the target: eq. (19)'s exact
        Beta(1/2, 1/2) mixture (App. D.5) replaces the alternatives prior."""
        return UP(prior="exact") if self.prior == "alternatives" else self


@dataclass(frozen=True)
class WSR(BettingStrategy):
    """Waudby-Smith--Ramdas predictable plug-in bets (eq. 20-21), capped at ``c`` times the largest allowed bet; ``mu0``
    and ``var0`` are the prior mean and variance of eq. 21."""

    name: ClassVar[str] = "wsr"
    monotone_in_target: ClassVar[bool] = True  # the plug-in bet sees the observations, not the target
    c: float = 0.75
    mu0: float = 0.5
    var0: float = 0.25

    def __post_init__(self):
        _unit(self.c, "wsr c")
        if not (np.isfinite(self.mu0) and np.isfinite(self.var0) and self.var0 > 0):
            raise ValueError(f"wsr mu0 must be finite and var0 positive, got {self.mu0!r}, {self.var0!r}")

    def fractions(self, q, alpha, scale, state, *, delta, horizon):
        lam, new = _wsr(q, scale, state, delta=delta, horizon=horizon, c=self.c, mu0=self.mu0, var0=self.var0)
        # lambda <= c scale by construction; dividing back gives the fraction of the largest bet
        return np.minimum(lam / scale[:, None], self.c), new


# ONS step constant 2 / (2 - ln 3) of Cutkosky & Orabona ("Black-box reductions for parameter-free online learning in
# Banach spaces", COLT 2018, arXiv:1802.06293)
_ONS_STEP = 2.0 / (2.0 - math.log(3.0))


@dataclass(frozen=True)
class ONS(BettingStrategy):
    """Online Newton step bets: the bet fraction follows the gradient of the log wealth.

    With y_i = scale (q_i - alpha) <= 1, the loss -log(1 - u y_i) has gradient g_i = y_i / (1 - u_i y_i); with
    A_i = 1 + sum g^2, u_{i+1} = clip(u_i - 2/(2 - ln 3) g_i / A_i, 0, c) (Cutkosky & Orabona, arXiv:1802.06293,
    section 5; used for betting confidence sequences by Waudby-Smith & Ramdas, arXiv:2010.09686). u_1 = 0; the cap
    ``c`` <= 1/2 keeps every factor >= 1 - c. Its bets depend on the target, so its two-sided intervals come from
    :meth:`interval_strategy` (UP).
    """

    name: ClassVar[str] = "ons"  # not monotone: the fraction follows the centred observations q - alpha
    c: float = 0.5

    def __post_init__(self):
        _unit(self.c, "ons c")

    def fractions(self, q, alpha, scale, state, *, delta, horizon):
        rows, n = q.shape
        y = scale[:, None] * (q - alpha[:, None])  # (rows, n), each <= 1
        u = state.get("u", rows, 0.0)
        a = state.get("a", rows, 1.0)
        fractions = np.empty((rows, n))
        for i in range(n):  # each bet depends on the previous one: a loop over time, vectorised over rows
            fractions[:, i] = u
            yi = y[:, i]
            g = yi / (1.0 - u * yi)
            a = a + g * g
            u = np.clip(u - _ONS_STEP * g / a, 0.0, self.c)
        return fractions, BettingState(state.count + n, {"u": u, "a": a})


def register_strategy(cls: type[BettingStrategy]) -> type[BettingStrategy]:
    """Add a strategy class to :data:`~.bets.BETS` (usable as a decorator); ``betting: NAME`` or ``{kind: NAME, ...}``
    then selects it wherever ``betting`` is taken."""
    if not (isinstance(cls, type) and issubclass(cls, BettingStrategy)):
        raise TypeError(f"betting: a registered item must subclass BettingStrategy, got {cls!r}")
    return register_bet(cls)


for _cls in (UP, WSR, ONS):
    register_strategy(_cls)


def get_strategy(betting) -> BettingStrategy:
    """A strategy from a name (``"up"``), a mapping (``{"kind": "up", "prior": "grid"}``) or an instance (returned as
    is). Unknown names and bad parameters are one-line errors."""
    return get_bet(betting, BetUse.TEST)


def log_factors(q: np.ndarray, alpha: np.ndarray, scale: np.ndarray, *, betting, delta: float, horizon: int,
                state: BettingState | None = None, context: BetContext | None = None):
    """Per-step log wealth increments log(1 - lambda_i (q_i - alpha)) for rows of ``q`` (rows, n); ``alpha``, ``scale``:
    (rows,).

    A row's e-process is the exponential of the cumulative sum (eq. 6). ``state`` resumes after ``state.count``
    observations; ``context``: :class:`BetContext`. Returns (increments, state after them).
    """
    return get_strategy(betting).log_factors(q, alpha, scale, BettingState() if state is None else state,
                                             delta=delta, horizon=horizon, context=context)
