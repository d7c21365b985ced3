"""Priors over the bet fraction of the Universal Portfolio (eq. 19 of R-AutoEval+): the exact Beta(1/2, 1/2) mixture
by quadrature, the paper's grid, and certsel's default, Jeffreys' prior on the alternatives a horizon can certify
(docs/statistics.md, "Bets")."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .roots import last_positive

UP_PRIORS = ("alternatives", "exact", "grid")
# The judge-controlled rows' atom, as a fraction of the largest bet: the worst outcome costs at most log 20 = 3 nats.
CAP_NODE = 0.95
# The atom's default mass on judge-controlled rows (UP(cap_mass=...)): docs/statistics.md, "Bets".
DEFAULT_CAP_MASS = 0.5

@dataclass(frozen=True)
class UPPrior:
    """A discrete prior over the bet fraction u in (0, 1): ``nodes`` and ``weights`` (sum 1)."""

    nodes: np.ndarray
    weights: np.ndarray
    kind: str

    @property
    def size(self) -> int:
        return int(self.nodes.size)


def up_prior(kind: str = "exact", *, horizon: int | None = None, size: int = 10_000, theta: float = 0.5,
             cap_mass: float = 0.0, delta: float | None = None) -> UPPrior:
    """A discretised prior over the bet fraction u of the Universal Portfolio (eq. 19).

    ``kind="alternatives"`` (certsel's default): :func:`alternatives_prior`. ``"exact"`` and ``"grid"`` are the
    Beta(1/2, 1/2) prior F of eq. (19):

    ``"exact"``: Gauss-Chebyshev quadrature. The Beta(1/2, 1/2) density is the Chebyshev weight on [0, 1], so the m
    nodes ``u_k = (1 + cos((2k - 1) pi / (2m))) / 2`` with weights 1/m integrate every polynomial of degree <= 2m - 1
    exactly. The integrands of eq. (19) after i - 1 observations have degree <= i, so ``m = horizon // 2 + 1`` nodes
    reproduce the continuous-prior bet for the whole horizon (past it, still a valid discrete-prior mixture).

    ``"grid"``: the paper's discretisation, ``size`` cell midpoints ``(k - 1/2) / size`` (the density is infinite at 0
    and 1) weighted by the Beta(1/2, 1/2) density.
    """
    if kind == "alternatives":
        return alternatives_prior(theta, horizon=horizon, cap_mass=cap_mass, delta=delta)
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


def alternatives_prior(theta: float, *, horizon: int | None, cap_mass: float = 0.0,
                       delta: float | None = None) -> UPPrior:
    """The prior over bet fractions that puts Jeffreys' prior on the alternatives, plus an atom (docs/statistics.md,
    "Bets").

    A test of H0: mean >= alpha on [lo, hi] bets u / (hi - alpha). Against the Bernoulli alternative on {lo, hi} with
    mean lo + p (hi - lo), p < theta = (alpha - lo) / (hi - lo), the log-optimal fraction is u*(p) = 1 - p / theta, with
    growth kl(p, theta). This discretises Jeffreys' prior p^(-1/2) (1 - p)^(-1/2) on the alternatives, carried to u by
    that map: with ``delta``, only those ``horizon`` labels can certify, log(1/delta) / kl(p, theta) <= horizon, i.e.
    p <= p_h (the two-point law is the hardest with its mean, so an alternative left out needs more than the horizon
    whatever its shape); without, every p in [0, theta). Nodes: ``horizon // 2 + 1`` Gauss-Jacobi nodes for p^(-1/2) on
    [0, p_h], weights times (1 - p)^(-1/2). The prior depends on the test, never on the data, so every bet is
    predictable.

    ``cap_mass`` moves that much mass to one node at u = :data:`CAP_NODE`, always present (mass 0 when ``cap_mass`` is
    0) so that rows of one strategy share a node count and their states stack.
    """
    theta = float(theta)
    if not 0.0 < theta < 1.0:
        raise ValueError(f"theta (the target's place in the loss range) must be in (0, 1), got {theta!r}")
    if not 0.0 <= float(cap_mass) < 1.0:
        raise ValueError(f"cap_mass must be in [0, 1), got {cap_mass!r}")
    if horizon is None or int(horizon) < 1:
        raise ValueError("the alternatives prior needs a positive horizon (number of observations)")
    m = int(horizon) // 2 + 1
    top = theta if delta is None else _certifiable(theta, math.log(1.0 / float(delta)) / int(horizon))
    x, w = _jacobi(m)  # weight (1 + x)^(-1/2) on [-1, 1], i.e. p^(-1/2) with p = top (1 + x) / 2
    p = 0.5 * top * (1.0 + x)
    w = w / np.sqrt(1.0 - p)
    nodes = np.append(1.0 - p / theta, CAP_NODE)
    weights = np.append((1.0 - cap_mass) * w / w.sum(), cap_mass)
    order = np.argsort(nodes, kind="stable")
    return UPPrior(nodes[order], weights[order], "alternatives")


@functools.lru_cache(maxsize=64)
def _jacobi(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Jacobi nodes and weights of order ``m`` for (1 + x)^(-1/2): an eigenproblem of size m, the same for every
    candidate of a job (one horizon), so solved once (read-only arrays)."""
    from scipy.special import roots_jacobi  # here, not at import: reading a job file needs no scipy

    x, w = roots_jacobi(m, 0.0, -0.5)
    x.flags.writeable = False
    w.flags.writeable = False
    return x, w


def _certifiable(theta: float, rate: float) -> float:
    """The largest p with kl(p, theta) >= ``rate``: kl(., theta) falls from log(1/(1 - theta)) at 0 to 0 at theta.

    Found by bisection to adjacent floats (:mod:`.roots`, no scipy.optimize); the prior is valid whatever ``top`` it
    gets (it depends on the test, never on the data), so its precision is a matter of efficiency only.
    tests/test_evalue_exact.py compares it with scipy's brentq."""
    def gap(p: float) -> float:
        return (p * math.log(p / theta) if p > 0 else 0.0) + (1.0 - p) * math.log((1.0 - p) / (1.0 - theta)) - rate

    if gap(0.0) <= 0.0:  # not even the easiest alternative gets there: keep them all
        return theta
    return last_positive(gap, 0.0, theta)  # gap(0) > 0 = gap(theta) + rate
