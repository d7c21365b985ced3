"""Confidence bounds of R-Eval, R-AutoEval and R-AutoEval+ (App. D.5 of R-AutoEval+): the one-sided bound that
inverts a test at the level of its decision, the anytime one-sided bounds and two-sided intervals of the hedged
capital process, each from the e-processes of :mod:`.autoeval` (docs/statistics.md, "Bounds next to a
certificate")."""

from __future__ import annotations

import dataclasses

import numpy as np

from ._validation import check_bounds, check_level, check_losses, check_target, check_weights
from .autoeval import (DEFAULT_RHOS, _CI_BISECTION_STEPS, EffectiveObservations, _prepare, check_horizon,
                       component_log_evalues, decision_fractions, mix_log_evalues)
from .betting import BettingStrategy, get_strategy
from .bounds import inverted_upper_bound
from .sampling import IID, Sampling


def upper_confidence_bound(human, judge_labeled=None, judge_unlabeled=None, *, delta: float, rhos=DEFAULT_RHOS,
                           betting: str | dict | BettingStrategy = "up", loss_bounds=(0.0, 1.0), weights=None,
                           horizon: int | None = None, sampling: Sampling = IID(),
                           past_horizon: bool = False, n_used=None) -> np.ndarray:
    """Anytime-valid upper confidence bound on R at level 1 - delta (App. D.5), with the strategy's
    :meth:`~certsel.policies.betting.BettingStrategy.interval_strategy` (``past_horizon``: more labels than ``horizon``
    are allowed, as :func:`check_horizon` says).

    ``U_n = inf{a : max_{i<=n} E_i(a) >= 1/delta}``. With bets bounded by 1/(M_s - m_s) (independent of the target)
    every E_i(a) is non-decreasing in a, so the confidence set is an interval and bisection finds its end (the upper end
    of the final bracket: conservative). P(exists n: R > U_n) <= delta by Ville's inequality at a = R.
    ``n_used`` (batch shape): the labels each element holds, the rest padding (default all): its bound is the one of its
    first ``n_used`` labels alone, since every bet is chosen from the past.
    """
    delta = check_level(delta, "delta")
    obs, w, betting, horizon = _prepare(
        human, judge_labeled, judge_unlabeled, rhos, loss_bounds, weights, betting, horizon, sampling=sampling,
        past_horizon=past_horizon)
    if not betting.monotone_in_target:
        raise ValueError(f"betting {betting.name!r} bets depend on the target, so its rejected targets need not "
                         f"form an interval; use {betting.name}.interval_strategy() for confidence bounds")
    # interval form: a prior that does not move with the target (for UP, eq. 19's Beta(1/2, 1/2))
    return _bisect_upper(obs, w, betting.interval_strategy(), horizon, level=delta, n_used=n_used)


def _bisect_upper(obs, w, betting, horizon, *, level, n_used=None) -> np.ndarray:
    """inf{a : max_{i <= n_used} E_i(a) >= 1/level} by bisection over the range-scaled e-processes of App. D.5
    (:attr:`monotone_in_target` strategies only); returns the upper end of the final bracket, a rejected target."""
    lo, hi = obs.loss_bounds
    threshold = np.log(1.0 / level)
    batch = obs.q.shape[:-2]
    n = obs.q.shape[-1]
    held = None if n_used is None else np.arange(n) < np.broadcast_to(np.asarray(n_used), batch)[..., None]

    def rejected(a):
        log_e = mix_log_evalues(component_log_evalues(obs, a, delta=level, betting=betting, horizon=horizon,
                                                      ci_scale=True), w)
        if held is not None:
            log_e = np.where(held, log_e, -np.inf)
        return log_e.max(axis=-1) >= threshold

    low = np.full(batch, lo)
    high = np.full(batch, hi)  # every target >= hi is trivially rejected
    for _ in range(_CI_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        rej = rejected(mid)
        high = np.where(rej, mid, high)
        low = np.where(rej, low, mid)
    # the whole range is rejected only on the miscoverage event; report the bottom then
    return np.where(rejected(np.full(batch, lo)), lo, high)


def decision_upper_bound(human, judge_labeled=None, judge_unlabeled=None, *, level: float, delta: float,
                         alpha: float, rhos=DEFAULT_RHOS, betting: str | dict | BettingStrategy = "up",
                         loss_bounds=(0.0, 1.0), weights=None, horizon: int | None = None, max_log_evalue=None,
                         n_used=None, observation: str = "paper", sampling: Sampling = IID(),
                         past_horizon: bool = False) -> np.ndarray:
    """The one-sided upper bound that inverts the test of H0: R > alpha itself, at ``level``.

    It inverts a family of tests fixed in advance that contains the test at alpha (:mod:`certsel.policies.bounds`):
    below alpha the test's own bet fractions (:func:`decision_fractions`, sized for ``delta``) scaled to each target;
    above alpha the strategy's test at that target when it is monotone in the target (UP, WSR), with the prior of the
    test at alpha (a prior that moved with the target could stop rejecting just above alpha), else the same fractions
    again. U = inf{a : rejected} has P(R > U) <= level, and U <= alpha exactly when the test reached 1/level at alpha,
    for every strategy. ``max_log_evalue`` (batch shape), the test's recorded running maximum, seeds the decision so
    that the two agree to the last bit even when labels arrived in rounds; ``n_used`` counts the labels each element
    used (default all). One-sided at the full level, it is usually tighter than the two-sided interval's upper end at
    level/2.
    """
    delta = check_level(delta, "delta")
    level = check_level(level, "level")
    bounds = check_bounds(loss_bounds)
    alpha = check_target(alpha, bounds)
    obs, w, strategy, horizon = _prepare(human, judge_labeled, judge_unlabeled, rhos, loss_bounds, weights, betting,
                                         horizon, observation, sampling, past_horizon)
    u = decision_fractions(obs, alpha, delta=delta, betting=strategy, horizon=horizon)
    rejected = None if max_log_evalue is None else np.asarray(max_log_evalue, dtype=np.float64) >= -np.log(level)
    S, n = obs.q.shape[-2:]
    used = None if n_used is None else np.broadcast_to(n_used, obs.q.shape[:-2]).reshape(-1)

    def family(a, rows):  # the strategy's own test at targets a (points, rows), with the prior of the test at alpha
        many = _rows_of(obs, rows, a.shape[0])
        log_e = mix_log_evalues(component_log_evalues(many, a, delta=delta, betting=strategy, horizon=horizon,
                                                      test_alpha=alpha), w)
        if used is not None:
            log_e = np.where(np.arange(n) < used[rows][:, None], log_e, -np.inf)
        return log_e.max(axis=-1)

    # re-chosen bets are monotone in the target for a constant-bet mixture (UP) in either form, and for WSR's
    # target-free plug-in on the paper form only (on the split form it learns from the target-dependent units)
    monotone = strategy.constant_bet_mixture or (strategy.monotone_in_target and not obs.split)
    if obs.split:
        return inverted_upper_bound(obs.parts[..., 0], obs.tops, u, alpha, level=level, log_weights=np.log(w),
                                    rejected=rejected, n_used=n_used, bounds=bounds, family=family if monotone else None,
                                    cap_target=obs.cap_target, extra=obs.parts[..., 1])
    return inverted_upper_bound(obs.q, obs.upper[:, None], u, alpha, level=level, log_weights=np.log(w),
                                rejected=rejected, n_used=n_used, bounds=bounds, family=family if monotone else None)


def _rows_of(obs: EffectiveObservations, rows, points: int) -> EffectiveObservations:
    """The batch elements ``rows`` of ``obs`` (flattened batch), repeated for ``points`` targets: batch shape (points,
    len(rows))."""
    S, n = obs.q.shape[-2:]

    def pick(x, tail):
        return None if x is None else np.broadcast_to(x.reshape((-1,) + tail)[rows], (points, len(rows)) + tail)

    return dataclasses.replace(obs, q=pick(obs.q, (S, n)), parts=pick(obs.parts, (S, n, 2)),
                               tops=pick(obs.tops, (S, n)), judge_sum=None, draws=None)


def lower_confidence_bound(human, judge_labeled=None, judge_unlabeled=None, *, loss_bounds=(0.0, 1.0), **kwargs):
    """Anytime-valid lower confidence bound at level 1 - delta.

    Mirroring every loss, l -> lo + hi - l, mirrors each effective observation (same support since m_s + M_s = lo + hi)
    and the risk; the bound is lo + hi minus the upper bound of the mirrored data (App. D.5).
    """
    lo, hi = check_bounds(loss_bounds)

    def mirror(x, name):
        return None if x is None else lo + hi - check_losses(x, name, (lo, hi))

    up = upper_confidence_bound(
        mirror(human, "human"),
        mirror(judge_labeled, "judge_labeled"),
        mirror(judge_unlabeled, "judge_unlabeled"),
        loss_bounds=(lo, hi),
        **kwargs,
    )
    return lo + hi - up


def interval_excludes(obs: EffectiveObservations, target, *, delta: float, betting="up", horizon: int | None = None,
                      weights=None) -> np.ndarray:
    """Whether the two-sided anytime interval at level delta (:func:`confidence_interval`) has excluded ``target`` at
    some step, per batch element.

    The interval misses ``target`` exactly when one of its one-sided tests at delta/2 (range-bounded bets, App. D.5)
    rejected it: one e-process per side instead of a bisection.
    """
    delta = check_level(delta, "delta")
    strategy = get_strategy(betting).interval_strategy()
    S, n = obs.q.shape[-2:]
    horizon = check_horizon(horizon, n)
    w = check_weights(weights, S)
    thr = np.log(2.0 / delta)
    a = np.broadcast_to(np.asarray(target, dtype=np.float64), obs.q.shape[:-2])
    kw = dict(delta=delta / 2, betting=strategy, horizon=horizon, ci_scale=True)
    up = mix_log_evalues(component_log_evalues(obs, a, **kw), w).max(axis=-1) >= thr
    lo, hi = obs.loss_bounds
    mirrored = EffectiveObservations(q=(lo + hi) - obs.q, lower=(lo + hi) - obs.upper, upper=(lo + hi) - obs.lower,
                                     r=obs.r, loss_bounds=obs.loss_bounds)
    down = mix_log_evalues(component_log_evalues(mirrored, (lo + hi) - a, **kw), w).max(axis=-1) >= thr
    return up | down


def confidence_interval(human, judge_labeled=None, judge_unlabeled=None, *, delta, **kwargs):
    """Two-sided anytime-valid interval (low, high) at level 1 - delta: one-sided bounds at delta/2 each (the split
    epsilon = 1/2 of App. D.5)."""
    delta = check_level(delta, "delta")
    low = lower_confidence_bound(human, judge_labeled, judge_unlabeled, delta=delta / 2, **kwargs)
    high = upper_confidence_bound(human, judge_labeled, judge_unlabeled, delta=delta / 2, **kwargs)
    return low, high
