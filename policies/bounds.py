"""The one-sided upper bound that inverts a betting test, computed from the test's own bets.

A testing policy certifies R <= alpha when its wealth, built from bet fractions u_i chosen from past observations,
reaches 1/level. The bound printed next to that certificate must come from the same test, or the two can contradict each
other (a certified candidate with a bound above alpha, or an uncertified one with a bound below it).

An upper confidence bound inverts a family of tests {phi_a}, one level-``level`` test of the null R >= a per target a,
fixed before the data: U = sup{a : phi_a does not reject} has P(R > U) <= P(phi_R rejects) <= level. certsel's family
contains the test that decided at a = alpha:

* **below alpha: the same bets.** Step i's observation q_i lies in [., M_i], M_i fixed before the draw (the top of the
  PPI++ or stratified observation's range); the test at alpha bets lambda_i = u_i / (M_i - alpha). Keep the fractions
  u_i and bet u_i / d_i(a), d_i(a) = max(M_i - a, eps): f_i(a) = 1 - u_i (q_i - a) / d_i(a) lies in [1 - u_i, 1 + ...]
  for q_i <= M_i, and under R >= a its conditional mean is 1 - u_i (R - a)/d_i(a) <= 1, so prod_i f_i(a) (or a fixed
  mixture sum_s w_s prod_i f_{s,i}(a)) is a test supermartingale for R >= a. It is non-decreasing in a, since
  (q - a)/(M - a) is non-increasing in a when q <= M;
* **above alpha: the strategy's own test at a** (bets re-chosen for the target), when that family is non-decreasing in a
  (a mixture of constant bets such as UP, or bets from the observations alone such as WSR on PPI++ observations:
  ``family``); otherwise the same bets continue. Either way each test is valid for its target.

Both pieces are the test itself at a = alpha, so the rejected targets form an interval [U, top], U <= alpha exactly when
the test at alpha reached 1/level, and the bisection is seeded with the test's recorded decision at alpha (search
[bottom, alpha] when it certified, [alpha, top] when not): the printed bound agrees with the printed decision to the
last bit, for every strategy and however the labels arrived in rounds. Below alpha the same bets are at least as tight
as re-chosen ones (the certified candidates' bounds); above alpha re-chosen bets are tighter (the others').
"""

from __future__ import annotations

import numpy as np

from ._validation import check_level

# the smallest bet denominator d_i(a): reached only when the draw cannot exceed the target
MIN_RANGE = 1e-9
# the search evaluates _POINTS targets per pass (one vectorised call); after _PASSES passes the
# bracket has shrunk by (_POINTS + 1) ** _PASSES = 2**32
_POINTS = 15
_PASSES = 8


def max_log_wealth(q, upper, u, target, *, log_weights=None, n_used=None, cap_target=None, extra=None) -> np.ndarray:
    """log max_{t <= n_used} E_t(target) with the same bets (module docstring), shape (...).

    ``q``, ``u`` (..., S, n): observations and the test's fractions; ``upper`` (M_i) broadcasts to them. ``target``: a
    scalar or the batch shape, possibly after a leading axis of its own (several targets; the result then has it too).
    ``log_weights`` (S,): log mixture weights (default uniform). ``n_used`` (...): steps belonging to each row (default
    all). The split observation (:func:`~certsel.policies.autoeval.effective_observations`) adds ``extra`` (like ``q``),
    a second factor 1 - u b / d sharing each bet and not moving with the target, and ``cap_target`` (S,):
    d = max(upper - min(a, cap_target), eps), fixed for a component whose cap is taken at the bottom of the range (every
    factor stays >= 0 at every target above it).
    """
    q = np.asarray(q, dtype=np.float64)
    S, n = q.shape[-2:]
    a = np.asarray(target, dtype=np.float64)[..., None, None]  # (..., 1, 1), with any leading axes
    d = np.maximum(upper - (a if cap_target is None else np.minimum(a, np.asarray(cap_target)[:, None])), MIN_RANGE)
    # <= u <= 1 in exact arithmetic; the cap only absorbs rounding at q = M
    bet = np.minimum(u * (q - a) / d, 1.0)
    with np.errstate(divide="ignore"):
        logf = np.log1p(-bet)
        if extra is not None:
            logf = logf + np.log1p(-np.minimum(u * extra / d, 1.0))
        path = np.cumsum(logf, axis=-1)
    if S == 1:
        mix = path[..., 0, :]
    else:
        lw = np.full(S, -np.log(S)) if log_weights is None else np.asarray(log_weights, dtype=np.float64)
        from scipy.special import logsumexp  # here, not at import: reading a job file needs no scipy
        mix = logsumexp(path + lw[:, None], axis=-2)
    if n_used is not None:
        mix = np.where(np.arange(n) < np.asarray(n_used)[..., None], mix, -np.inf)
    return mix.max(axis=-1) if n else np.zeros(mix.shape[:-1])


def inverted_upper_bound(q, upper, u, alpha: float, *, level: float, log_weights=None, rejected=None, n_used=None,
                         bounds=(0.0, 1.0), family=None, cap_target=None, extra=None) -> np.ndarray:
    """U = inf{a : the family rejects a}, the bound that inverts the test (module docstring).

    ``rejected`` (...): the test's own decision at ``alpha`` and ``level`` (running maximum log e-value >= -log(level));
    it seeds the search so that U <= alpha exactly when it is true (default: recomputed from the fractions).
    ``family(a, rows)``: log max_t E_t(a) of the strategy's own test at targets ``a`` (points, len(rows)) above alpha
    for the flattened batch elements ``rows``, when that test is non-decreasing in a (else the same bets serve).
    ``bounds`` (bottom, top): the range of R (U = top is trivial; U = bottom: every target rejected). Returns the upper
    end of the final bracket (a rejected target, or alpha), conservative by at most (top - bottom) / 2**32. Other
    arguments: :func:`max_log_wealth`.
    """
    level = check_level(level, "level")
    bottom, top = (float(b) for b in bounds)
    thr = -np.log(level)
    q = np.asarray(q, dtype=np.float64)
    batch, (S, n) = q.shape[:-2], q.shape[-2:]
    rows = int(np.prod(batch))
    flat = (q.reshape(rows, S, n), np.broadcast_to(upper, q.shape).reshape(rows, S, n),
            np.broadcast_to(u, q.shape).reshape(rows, S, n),
            None if n_used is None else np.broadcast_to(n_used, batch).reshape(rows),
            None if extra is None else np.broadcast_to(extra, q.shape).reshape(rows, S, n))

    def same_bets(a, idx) -> np.ndarray:  # a: (points, len(idx))
        qq, mm, uu, nn, ee = flat
        return max_log_wealth(qq[idx], mm[idx], uu[idx], a, log_weights=log_weights,
                              n_used=None if nn is None else nn[idx], cap_target=cap_target,
                              extra=None if ee is None else ee[idx]) >= thr

    everyone = np.arange(rows)
    if rejected is None:
        rej = same_bets(np.full((1, rows), alpha), everyone)[0]
    else:
        rej = np.broadcast_to(np.asarray(rejected, dtype=bool), batch).reshape(rows)
    out = np.empty(rows)
    certified, other = np.flatnonzero(rej), np.flatnonzero(~rej)
    # below alpha: the same bets; above alpha: the strategy's own tests when they are monotone
    out[certified] = _search(lambda a: same_bets(a, certified), np.full(certified.size, bottom),
                             np.full(certified.size, alpha))
    above = (lambda a: family(a, other) >= thr) if family is not None else (lambda a: same_bets(a, other))
    out[other] = _search(above, np.full(other.size, alpha), np.full(other.size, top))
    # the whole range rejected happens only on the miscoverage event; report the bottom then
    if certified.size:
        low_end = same_bets(np.full((1, certified.size), bottom), certified)[0]
        out[certified[low_end]] = bottom
    return out.reshape(batch)


def _search(rejects, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The first rejected target in [low, high] per row, as the upper end of a bracket of width (high - low) / 2**32;
    ``high`` is rejected or the trivial end, ``low`` is not, and ``rejects(points)`` (points, rows) is non-decreasing
    along the points."""
    if low.size == 0:
        return high
    steps = np.arange(1, _POINTS + 1)[:, None] / (_POINTS + 1)
    for _ in range(_PASSES):
        points = low + (high - low) * steps  # (points, rows), increasing
        r = rejects(points)
        first = np.where(r.any(axis=0), r.argmax(axis=0), _POINTS)  # the rejected points are a suffix
        high = np.concatenate([points, high[None]])[first, np.arange(low.size)]
        low = np.concatenate([low[None], points])[first, np.arange(low.size)]
    return high
