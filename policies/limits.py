"""How few labels any test could need: log(1/delta) / KL_inf, the information-theoretic limit.

For i.i.d. observations X with mean below alpha and values at most M, every level-delta test of H0: E[X] >= alpha needs
on average at least

    log(1/delta) / KL_inf(P, alpha),   KL_inf(P, alpha) = max_{0 <= l <= 1/(M - alpha)} E_P[log(1 - l (X - alpha))]

observations to reject (Honda and Takemura's dual form of the smallest KL divergence from P to a distribution with
mean >= alpha on (-inf, M]; the lower bound: Agrawal and Ramdas, arXiv:2504.19952). KL_inf is the best growth rate of
the wealth prod (1 - l (X_i - alpha)), so bets that track the maximiser l* reach the limit (Waudby-Smith, Sandoval and
Jordan, arXiv:2504.02818).

With a judge, the floor for any policy is the same bound on X_rho = h - rho j + rho mu_J (the judge's mean mu_J known,
the best rho), whose range tops at 1 + rho mu_J for losses in [0, 1]: :func:`ppi_limit`. X is given by samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import check_level
from .roots import last_positive


def kl_inf(x, alpha: float, upper: float) -> tuple[float, float]:
    """(KL_inf, u*) of the empirical distribution of ``x`` at ``alpha`` for values at most ``upper``: the best growth
    rate and the best bet as a fraction u* = l* (M - alpha) of the largest one (1 at the cap). Zero when
    mean(x) >= alpha."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("kl_inf needs finite samples")
    if x.max() > upper + 1e-12:
        raise ValueError(f"samples reach {x.max():.6g}, above the declared top {upper:.6g}")
    if not upper > alpha:
        raise ValueError(f"the top of the range ({upper:g}) must be above alpha ({alpha:g})")
    if x.mean() >= alpha:
        return 0.0, 0.0
    y = (x - alpha) / (upper - alpha)  # <= 1: the growth rate of the fraction u is E log(1 - u y)
    u = _best_fraction(y)
    with np.errstate(divide="ignore"):
        growth = float(np.mean(np.log1p(-u * y)))
    return max(growth, 0.0), u


def _best_fraction(y: np.ndarray) -> float:
    """argmax over u in [0, 1] of E log(1 - u y), for y <= 1 with E y < 0.

    The growth is concave in u and its slope -E[y / (1 - u y)] falls from -E y > 0 at 0: the maximiser is the cap
    where the slope is still >= 0 there, else the slope's root, found by bisection to adjacent floats (:mod:`.roots`, one
    numpy mean a step, no scipy.optimize; tests/test_stop_limit.py compares the growth with scipy's bounded
    minimiser)."""
    def slope(u: float) -> float:
        with np.errstate(divide="ignore"):  # some y = 1 at the cap: the slope is -inf there
            return -float(np.mean(y / (1.0 - u * y)))

    return 1.0 if slope(1.0) >= 0.0 else last_positive(slope, 0.0, 1.0)


def label_limit(x, alpha: float, delta: float, upper: float = 1.0) -> float:
    """log(1/delta) / KL_inf: the fewest labels any level-delta test needs on average (inf when mean(x) >= alpha)."""
    delta = check_level(delta, "delta")
    k, _ = kl_inf(x, alpha, upper)
    return float(np.log(1.0 / delta) / k) if k > 0 else float("inf")


@dataclass(frozen=True)
class PPILimit:
    """The prediction-powered floor: ``labels`` at the best ``rho``, and the fraction ``u_star`` of the largest bet that
    reaches it (1: the log-optimal bet sits at the cap)."""

    labels: float
    rho: float
    u_star: float


def ppi_limit(human, judge, alpha: float, delta: float, *, judge_mean: float | None = None,
              rhos=np.linspace(0.0, 1.0, 101)) -> PPILimit:
    """The floor for any policy with this judge: min over rho of log(1/delta) / KL_inf of X_rho = h - rho j + rho mu_J
    (X_rho <= 1 + rho mu_J), with ``judge_mean`` known (default: the mean of ``judge``)."""
    delta = check_level(delta, "delta")
    h = np.asarray(human, dtype=np.float64)
    j = np.asarray(judge, dtype=np.float64)
    if h.shape != j.shape:
        raise ValueError("human and judge losses must be paired (same shape)")
    mu = float(j.mean()) if judge_mean is None else float(judge_mean)
    best = PPILimit(float("inf"), 0.0, 0.0)
    for rho in np.asarray(rhos, dtype=np.float64):
        k, u = kl_inf(h - rho * j + rho * mu, alpha, 1.0 + rho * mu)
        labels = float(np.log(1.0 / delta) / k) if k > 0 else float("inf")
        if labels < best.labels:
            best = PPILimit(labels, float(rho), u)
    return best


def split_limit(human, judge, alpha: float, delta: float, *, r: int, judge_mean: float | None = None,
                rhos=np.linspace(0.0, 1.0, 21), draws: int = 20_000, seed: int = 0) -> PPILimit:
    """The fewest labels an oracle constant bet needs on the split observation with ``r`` judge-only labels per human
    label (:func:`~certsel.policies.autoeval.effective_observations`): what r costs against the floor.

    min over rho of log(1/delta) / max_l E[log(1 - l x) + log(1 - l b)], x = h - rho j - alpha + rho mu_J, b = rho
    (jbar - mu_J), jbar the mean of r judge losses, l <= 1/(1 + rho mu_J); the expectation over jbar is a seeded
    Monte Carlo average over ``draws`` blocks of the judge's losses.
    """
    delta = check_level(delta, "delta")
    h = np.asarray(human, dtype=np.float64)
    j = np.asarray(judge, dtype=np.float64)
    if h.shape != j.shape or h.ndim != 1:
        raise ValueError("human and judge losses must be paired 1-D samples")
    if int(r) < 1:
        raise ValueError(f"r must be a positive integer, got {r!r}")
    mu = float(j.mean()) if judge_mean is None else float(judge_mean)
    jbar = j[np.random.default_rng(seed).integers(0, j.size, size=(draws, int(r)))].mean(axis=1)
    best = PPILimit(float("inf"), 0.0, 0.0)
    for rho in np.asarray(rhos, dtype=np.float64):
        x = h - rho * j - alpha + rho * mu
        b = rho * (jbar - mu)
        cap = 1.0 / (1.0 + rho * mu) if rho > 0 else 1.0 / (1.0 - alpha)

        def minus_growth(u: float) -> float:
            with np.errstate(divide="ignore"):
                return -float(np.mean(np.log1p(-u * cap * x)) + np.mean(np.log1p(-u * cap * b)))

        from scipy.optimize import minimize_scalar  # here, not at import: reading a job file needs no scipy
        res = minimize_scalar(minus_growth, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-9})
        growth = -float(res.fun)
        labels = float(np.log(1.0 / delta) / growth) if growth > 0 else float("inf")
        if labels < best.labels:
            best = PPILimit(labels, float(rho), float(res.x))
    return best


def bernoulli_kl(p: float, q: float) -> float:
    """kl(p, q) = p log(p/q) + (1 - p) log((1 - p)/(1 - q)), with 0 log 0 = 0."""
    from scipy.special import rel_entr  # here, not at import: reading a job file needs no scipy
    return float(rel_entr(p, q) + rel_entr(1.0 - p, 1.0 - q))


def stop_limit(x, alpha: float, delta: float, budget: int, gamma: float, *, lower: float = 0.0,
               upper: float = 1.0) -> float:
    """The fewest labels (on average) any procedure needs to end, without certifying it, a candidate whose observations
    are distributed as the samples ``x`` (values in [lower, upper]; the test of R <= alpha at ``delta`` with ``budget``
    labels), when it must end it within the budget at least half the time and may end one its budget certifies easily
    at most ``gamma`` of the time.

    "Certifies easily": the risk ``a`` at which the limit (:func:`label_limit`) of ``x`` moved to mean ``a`` is half the
    budget. By the change-of-measure inequality (Kaufmann, Cappe and Garivier, *On the complexity of best-arm
    identification in multi-armed bandit models*, JMLR 2016, Lemma 1), a stopping time N and an event E of the data it
    has seen satisfy E_P[N] KL(P, Q) >= kl(P(E), Q(E)) for every Q. With E "ended without certifying", P(E) >= 1/2 and
    Q(E) <= gamma for every Q of mean at most ``a``:

        E_P[N] >= kl(1/2, gamma) / KL_inf^-(P, a),   KL_inf^-(P, a) = min {KL(P, Q) : Q on [lower, inf), mean(Q) <= a}

    (:func:`kl_inf` on the mirrored samples), capped at the budget. Inf when the samples' mean is at most ``a`` (they
    look certifiable: nothing bounds the labels to end it); 0 when no risk in [lower, alpha) is certified in half the
    budget (no candidate constrains the procedure); NaN when gamma >= 1/2 (no information is needed).
    """
    delta = check_level(delta, "delta")
    gamma = check_level(gamma, "gamma")
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0 or int(budget) < 1:
        raise ValueError("stop_limit needs samples and a positive budget")
    if gamma >= 0.5:
        return float("nan")
    mean, half = float(x.mean()), 0.5 * int(budget)

    def limit_at(a: float) -> float:  # the limit of x moved to mean a (inf at a >= alpha); its top moves with it
        return label_limit(x - (mean - a), alpha, delta, upper + max(a - mean, 0.0))

    lo, hi = lower, alpha  # limit_at rises from its least (at the bottom of the range) to inf (at alpha)
    if not lower < alpha or limit_at(lo) > half:
        return 0.0  # no risk in the range is certified in half the budget: the rule asks nothing of a procedure
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if limit_at(mid) <= half else (lo, mid)
    a = lo
    if mean <= a:
        return float("inf")
    divergence, _ = kl_inf(-x, -a, -lower)  # the smallest KL from P to a law of mean <= a above `lower`
    if divergence <= 0:
        return float("inf")
    return float(min(bernoulli_kl(0.5, gamma) / divergence, budget))


def ppi_stop_limit(human, judge, alpha: float, delta: float, budget: int, gamma: float, *,
                   judge_mean: float | None = None, rhos=np.linspace(0.0, 1.0, 11)) -> float:
    """:func:`stop_limit` for any policy with this judge: its smallest over rho of the prediction-powered observations
    X_rho = h - rho j + rho mu_J (in [rho mu_J - rho, 1 + rho mu_J]), as :func:`ppi_limit` takes the floor."""
    h = np.asarray(human, dtype=np.float64)
    j = np.asarray(judge, dtype=np.float64)
    if h.shape != j.shape:
        raise ValueError("human and judge losses must be paired (same shape)")
    mu = float(j.mean()) if judge_mean is None else float(judge_mean)
    return min(stop_limit(h - rho * j + rho * mu, alpha, delta, budget, gamma, lower=rho * mu - rho,
                          upper=1.0 + rho * mu) for rho in np.asarray(rhos, dtype=np.float64))
