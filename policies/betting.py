"""Betting strategies for testing by betting (App. C of R-AutoEval+).

All functions work on a batch of observation sequences laid out as ``(rows, n)``: one row per
(replication, candidate, reliance factor) triple, the last axis being time. A row's bet at
time i only looks at that row's observations 1..i-1 (predictability), which is what makes
the wealth a test supermartingale under H0: R >= alpha, and so an e-process that may be
stopped and inspected at any time (Ville's inequality).

Bets are written as ``lambda_i = scale * u_i`` with ``u_i`` in [0, 1) and
``scale = 1 / (M - alpha)`` for testing (the bound of eq. 6) or ``scale = 1 / (M - m)`` for
confidence intervals (App. D.5: the bet then no longer depends on alpha, which makes the
wealth monotone in alpha and the confidence set an interval).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

BETTING_STRATEGIES = ("up", "wsr")
UP_PRIORS = ("exact", "grid")

# Rows of the universal-portfolio wealth processed together: keeps the (rows, nodes)
# working set inside the L2 cache so every time step is a few cache-resident passes.
_UP_CHUNK_ELEMENTS = 1 << 16
# The node wealth is renormalised at most every this many steps, and more often when the
# data allow a faster growth (see _renormalise_every), so it never comes near overflow.
_UP_RENORMALISE_MAX = 64
_UP_FLUSH = 1e-200
# Worker threads for independent row blocks (CERTSEL_THREADS overrides; 1 disables).
_THREADS = int(os.environ.get("CERTSEL_THREADS", os.cpu_count() or 1))


@dataclass(frozen=True)
class UPPrior:
    """A discrete prior over the bet fraction u in (0, 1): ``nodes`` and ``weights`` (sum 1)."""

    nodes: np.ndarray
    weights: np.ndarray
    kind: str

    @property
    def size(self) -> int:
        return int(self.nodes.size)


def up_prior(kind: str = "exact", *, horizon: int | None = None, size: int = 10_000) -> UPPrior:
    """The Beta(1/2, 1/2) prior F of the Universal Portfolio bet (eq. 19), discretised.

    ``kind="exact"``: Gauss-Chebyshev quadrature. The Beta(1/2, 1/2) density is the
    Chebyshev weight on [0, 1], so the m nodes ``u_k = (1 + cos((2k - 1) pi / (2m))) / 2``
    with equal weights 1/m integrate every polynomial of degree <= 2m - 1 exactly. The
    integrands of eq. (19) after i - 1 observations are polynomials of degree <= i, so
    ``m = horizon // 2 + 1`` nodes reproduce the continuous-prior bet exactly for the whole
    horizon. Past the horizon the bet is still a valid mixture bet (a discrete prior), only
    no longer the continuous one.

    ``kind="grid"``: the discretisation used by the paper's experiments, ``size`` (default
    10,000) uniformly spaced points, here the cell midpoints ``(k - 1/2) / size`` (the
    density is infinite at 0 and 1), weighted by the Beta(1/2, 1/2) density.
    """
    if kind == "exact":
        if horizon is None or int(horizon) < 1:
            raise ValueError("the exact UP prior needs a positive horizon (number of observations)")
        m = int(horizon) // 2 + 1
        k = np.arange(1, m + 1)
        nodes = 0.5 * (1.0 + np.cos((2 * k - 1) * np.pi / (2 * m)))
        weights = np.full(m, 1.0 / m)
        return UPPrior(nodes[::-1].copy(), weights, "exact")
    if kind == "grid":
        if int(size) < 2:
            raise ValueError(f"up_grid_size must be >= 2, got {size!r}")
        nodes = (np.arange(int(size)) + 0.5) / int(size)
        dens = 1.0 / np.sqrt(nodes * (1.0 - nodes))
        return UPPrior(nodes, dens / dens.sum(), "grid")
    raise ValueError(f"up_prior must be one of {UP_PRIORS}, got {kind!r}")


@dataclass
class BettingState:
    """What the bets of a row depend on, so that a process can be resumed exactly.

    ``count`` observations have been consumed (the same for every row). WSR keeps the running
    sum of observations and of squared deviations (eq. 21); UP keeps the normalised wealth of
    every prior node (eq. 19). Arrays have one leading entry per row.
    """

    count: int = 0
    sum_q: np.ndarray | None = None
    sum_dev: np.ndarray | None = None
    wealth: np.ndarray | None = None


def _wsr(q, scale, state: BettingState, *, delta, horizon, c, mu0, var0):
    """WSR bets for the next q.shape[-1] rounds after ``state``; returns (lambda, state')."""
    n = q.shape[-1]
    sum_q = np.zeros(q.shape[0]) if state.sum_q is None else state.sum_q
    sum_dev = np.zeros(q.shape[0]) if state.sum_dev is None else state.sum_dev
    j = state.count + np.arange(1, n + 1, dtype=np.float64)  # global round index
    mu = (mu0 + sum_q[:, None] + np.cumsum(q, axis=-1)) / (j + 1.0)  # mu_j
    dev = np.cumsum((q - mu) ** 2, axis=-1)
    # sigma2_{j-1} uses squared deviations of rounds 1..j-1
    past = np.concatenate([sum_dev[:, None], sum_dev[:, None] + dev[:, :-1]], axis=-1)
    sigma2 = (var0 + past) / j
    lam = np.minimum(c * scale[:, None], np.sqrt(2.0 * np.log(1.0 / delta) / (horizon * sigma2)))
    new = BettingState(state.count + n, sum_q + q.sum(axis=-1), sum_dev + dev[:, -1])
    return lam, new


def wsr_fractions(
    q: np.ndarray,
    scale: np.ndarray,
    *,
    delta: float,
    horizon: int,
    c: float = 0.75,
    mu0: float = 0.5,
    var0: float = 0.25,
) -> np.ndarray:
    """Waudby-Smith--Ramdas bets, eq. (20)-(21), for every row and time at once.

    ``lambda_i = min(c * scale, sqrt(2 log(1/delta) / (horizon * sigma2_{i-1})))`` with
    ``mu_j = (mu0 + sum_{k<=j} q_k) / (j + 1)`` and
    ``sigma2_{i-1} = (var0 + sum_{j<i} (q_j - mu_j)^2) / i``. Both running sums are
    cumulative sums, so no loop over time is needed. ``q`` is (rows, n), ``scale`` (rows,);
    returns the bets lambda (rows, n).
    """
    lam, _ = _wsr(q, scale, BettingState(), delta=delta, horizon=horizon, c=c, mu0=mu0, var0=var0)
    return lam


def up_log_factors(x: np.ndarray, scale: np.ndarray, prior: UPPrior, wealth0: np.ndarray | None = None):
    """log(1 - lambda_i x_i) for Universal Portfolio bets, eq. (19).

    The UP bet is the posterior mean of the bet under the prior, weighted by the wealth each
    constant bet would have made so far:
    ``lambda_i = scale * sum_k w_k u_k E_{i-1}(scale u_k) / sum_k w_k E_{i-1}(scale u_k)``.
    The node wealth is kept multiplicatively and both sums come from one (rows, K) x (K, 2)
    product per step. The loop is over time only; rows are processed in cache-sized blocks.
    ``wealth0`` (rows, K) resumes from a previous call's final node wealth. Returns the log
    factors (rows, n) and the final normalised node wealth (rows, K).
    """
    rows, n = x.shape
    nodes, weights = prior.nodes, prior.weights
    K = nodes.size
    every = _renormalise_every(x, scale, nodes.max())
    both = np.stack([nodes, np.ones(K)], axis=1)  # (K, 2): numerator and denominator
    # factor matrix 1 - y_r u_k as a rank-2 product [1, y] @ [[1], [-u]]: one BLAS call
    affine = np.stack([np.ones(K), -nodes], axis=0)  # (2, K)
    out = np.empty((rows, n))
    final = np.empty((rows, K))
    block = max(1, _UP_CHUNK_ELEMENTS // K)

    def run_block(start: int) -> None:
        stop = min(rows, start + block)
        y = scale[start:stop, None] * x[start:stop]  # (r, n): lambda_i (q_i - alpha) = u_i y_i
        # (n, r, 2): step i's [1, y] pairs are contiguous
        ys = np.stack([np.ones((n, stop - start)), y.T], axis=2)
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
            np.matmul(ys[i], affine, out=factor)
            wealth *= factor
            if i % every == every - 1:
                wealth /= wealth.sum(axis=1, keepdims=True)
                # Zeroing shares below 1e-200 of the total moves the next bet by less than
                # that, keeps every bet predictable (so the e-process stays valid) and keeps
                # the arithmetic out of slow subnormal numbers.
                np.putmask(wealth, wealth < _UP_FLUSH, 0.0)
        np.log1p(-(u.T * y), out=out[start:stop])
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

    With y = scale * x, a node's factor 1 - u y lies in [f, g] with
    g = 1 + max(0, -min y) and f = 1 - u_max max(0, max y) > 0. Over k steps the wealth grows
    by at most g**k and shrinks by at most f**k; k is chosen so that both stay within
    1e250, far from overflow and underflow.
    """
    y = scale[:, None] * x
    g = 1.0 + max(0.0, float(-y.min()))
    f = 1.0 - u_max * max(0.0, float(y.max()))
    worst = max(np.log10(g), -np.log10(f), 1e-12)
    return int(np.clip(250.0 / worst, 1, _UP_RENORMALISE_MAX))


def log_factors(
    q: np.ndarray,
    alpha: np.ndarray,
    scale: np.ndarray,
    *,
    betting: str,
    delta: float,
    horizon: int,
    prior: UPPrior | None = None,
    wsr_c: float = 0.75,
    wsr_mu0: float = 0.5,
    wsr_var0: float = 0.25,
    state: BettingState | None = None,
):
    """Per-step log wealth increments log(1 - lambda_i (q_i - alpha)) for rows of ``q``.

    ``q`` is (rows, n); ``alpha`` and ``scale`` are (rows,). The e-process of a row is the
    exponential of the cumulative sum of the increments (eq. 6). ``state`` resumes a process
    after ``state.count`` earlier observations. Returns (increments, state after them).
    """
    state = BettingState() if state is None else state
    x = q - alpha[:, None]
    if betting == "wsr":
        lam, new = _wsr(q, scale, state, delta=delta, horizon=horizon, c=wsr_c, mu0=wsr_mu0, var0=wsr_var0)
        return np.log1p(-lam * x), new
    if betting == "up":
        if prior is None:
            prior = up_prior("exact", horizon=horizon)
        out, wealth = up_log_factors(x, scale, prior, state.wealth)
        return out, BettingState(state.count + q.shape[-1], wealth=wealth)
    raise ValueError(f"betting must be one of {BETTING_STRATEGIES}, got {betting!r}")
