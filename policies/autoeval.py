"""R-Eval, R-AutoEval and R-AutoEval+ (sections 2-3 and Algorithm 1 of R-AutoEval+).

One candidate's evidence that its risk R = E[loss] is at most a target ``alpha`` is an e-process built from n
human-labelled losses, the judge's losses on the same n items and the judge's losses on N unlabelled items. Everything
is vectorised over arbitrary leading batch axes (e.g. replications x candidates); the last axis is the sample axis.

Schemes differ only in the reliance factors rho (eq. 9-10):

* R-Eval:       rhos = [0]            q_i = human loss
* R-AutoEval:   rhos = [1]            q_i = PPI effective observation (eq. 8)
* R-AutoEval+:  rhos = linspace(0,1,S) mixture of S PPI++ e-processes (eq. 11-13)

The exponential-weights update (13) telescopes: with ``w_{s,i} ∝ w_{s,0} E_{s,i-1}``,
``E_n = prod_i sum_s w_{s,i} e_{s,i} = sum_s w_{s,0} E_{s,n}``. The code uses this closed form (a log-sum-exp over rho);
the tests check it against the literal update of Algorithm 1. Validity and the split observation: docs/statistics.md,
"Testing by betting" and "R-Eval, R-AutoEval, R-AutoEval+".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._validation import (
    check_bounds,
    check_level,
    check_losses,
    check_positive_int,
    check_rhos,
    check_target,
    check_weights,
)
from .betting import BetContext, BettingState, BettingStrategy, get_strategy
from .bounds import MIN_RANGE, inverted_upper_bound
from .sampling import IID, Drawn, Sampling, TableDraws

DEFAULT_RHOS = np.linspace(0.0, 1.0, 10)
SCHEMES = {
    "r-eval": np.array([0.0]),
    "r-autoeval": np.array([1.0]),
    "r-autoeval+": DEFAULT_RHOS,
}
# Bisection steps for confidence bounds: the bracket shrinks to (hi - lo) / 2**30.
_CI_BISECTION_STEPS = 30


def scheme_rhos(scheme: str) -> np.ndarray:
    """Reliance factors of a named scheme: 'r-eval', 'r-autoeval' or 'r-autoeval+'."""
    try:
        return SCHEMES[scheme].copy()
    except KeyError:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}") from None


OBSERVATIONS = ("paper", "split")


@dataclass(frozen=True)
class EffectiveObservations:
    """PPI++ effective observations (eq. 10) for every rho, with their support.

    ``q`` has shape (..., S, n); ``lower``/``upper`` (S,) are the support bounds m_s = lo - rho_s (hi - lo) and
    M_s = hi + rho_s (hi - lo); ``r`` is floor(N / n).

    The ``split`` form (:func:`effective_observations`) also holds ``parts`` (..., S, n, 2): x = h - rho j + rho c and
    b = rho (jbar - c), with c a predictable estimate of the judge's mean (so x + b = q), ``tops`` (..., S, n), the
    denominator of each step's bet, and ``cap_target`` (S,), the target at which that denominator is taken (module
    docstring of :mod:`certsel.policies.bounds`); ``judge_sum``/``judge_count`` carry the judge labels seen, for a test
    that continues with more labels. ``draws`` (sampling without replacement only) are the table's streams after these
    observations.
    """

    q: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    r: int
    loss_bounds: tuple[float, float]
    parts: np.ndarray | None = None
    tops: np.ndarray | None = None
    cap_target: np.ndarray | None = None
    judge_sum: np.ndarray | None = None
    judge_count: int = 0
    draws: TableDraws | None = None

    @property
    def split(self) -> bool:
        return self.parts is not None


def check_observation(observation: str) -> str:
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
    return observation


def effective_observations(
    human,
    judge_labeled=None,
    judge_unlabeled=None,
    *,
    rhos=DEFAULT_RHOS,
    loss_bounds=(0.0, 1.0),
    observation: str = "paper",
    judge_seen=None,
    sampling: Sampling = IID(),
    draws: TableDraws | None = None,
) -> EffectiveObservations:
    """Eq. (10): ``q_{s,i} = rho_s mean(judge on unlabelled block i) + human_i - rho_s judge_i``.

    Block i holds the unlabelled items r(i-1)+1 .. ri, r = floor(N / n); the last N - r n are unused (Algorithm 1). With
    every rho 0 (R-Eval) the judge inputs may be omitted. ``observation="split"`` adds the split form
    (docs/statistics.md, "The split observation"): x = h - rho j + rho c_i and b = rho (jbar_i - c_i) share one bet, c_i
    the mean of every judge label before step i (plus one pseudo-label mid-range); under R >= a, (1 - lambda
    (x - a))(1 - lambda b) has mean <= 1, and the largest bet is 1/(hi - lo + rho (c_i - lo)) instead of
    1/(M_s - alpha). ``judge_seen`` = (sum, count) of earlier steps' judge labels continues c for a test fed in batches.

    ``sampling=WithoutReplacement(N)`` (``draws``: its streams so far): human and judge-only items are drawn without
    replacement from a table of N in independent orders and enter through their streams' finite-population transforms,
    so each observation's conditional mean is the table's mean human loss exactly (docs/statistics.md, "Sampling without
    replacement"); the judge-only losses must then be exactly r per human label.
    """
    bounds = check_bounds(loss_bounds)
    rhos = check_rhos(rhos)
    check_observation(observation)
    h = check_losses(human, "human", bounds)
    n = h.shape[-1]
    width = bounds[1] - bounds[0]
    draws = sampling.start(h.shape[:-1]) if draws is None else draws
    if np.all(rhos == 0.0) and judge_labeled is None and judge_unlabeled is None:
        wor = None if draws is None else _drawn(draws, bounds, h)
        hq = h if wor is None else wor.h.y
        q = np.broadcast_to(hq[..., None, :], h.shape[:-1] + (rhos.size, n)).copy()
        obs = EffectiveObservations(q=q, lower=bounds[0] - rhos * width, upper=bounds[1] + rhos * width, r=0,
                                    loss_bounds=bounds, draws=None if wor is None else wor.after)
        return _split(obs, h, None, None, rhos, judge_seen, wor) if observation == "split" else obs
    if judge_labeled is None or judge_unlabeled is None:
        raise ValueError("judge_labeled and judge_unlabeled are required when some rho > 0")
    jl = check_losses(judge_labeled, "judge_labeled", bounds)
    ju = check_losses(judge_unlabeled, "judge_unlabeled", bounds)
    if jl.shape != h.shape:
        raise ValueError(
            f"judge_labeled must have the shape of human {h.shape}, got {jl.shape}"
        )
    if ju.shape[:-1] != h.shape[:-1]:
        raise ValueError(
            f"judge_unlabeled must share the batch shape {h.shape[:-1]} of human, "
            f"got {ju.shape[:-1]}"
        )
    N = ju.shape[-1]
    if N < n:
        raise ValueError(
            f"judge_unlabeled has N={N} items but N >= n={n} is needed when a judge is used"
        )
    r = N // n
    blocks = ju[..., : r * n].reshape(ju.shape[:-1] + (n, r))
    wor = None
    if draws is not None:
        if N != r * n:
            raise ValueError(f"sampling without replacement takes exactly r judge-only losses per human label; "
                             f"got {N} for {n} human labels")
        wor = _drawn(draws, bounds, h, jl, ju, r)
        correction = wor.g.y.reshape(blocks.shape).mean(axis=-1) - wor.j.y
        hq = wor.h.y
    else:
        correction = blocks.mean(axis=-1) - jl  # (..., n)
        hq = h
    q = hq[..., None, :] + rhos[:, None] * correction[..., None, :]
    obs = EffectiveObservations(q=q, lower=bounds[0] - rhos * width, upper=bounds[1] + rhos * width, r=r,
                                loss_bounds=bounds, draws=None if wor is None else wor.after)
    return _split(obs, h, jl, blocks, rhos, judge_seen, wor) if observation == "split" else obs


@dataclasses.dataclass(frozen=True)
class _Drawn:
    """One call's draws through the table's streams (human, judge on them, judge-only)."""

    h: Drawn
    j: Drawn | None
    g: Drawn | None
    after: TableDraws


def _drawn(draws: TableDraws, bounds, h, jl=None, ju=None, r: int = 0) -> _Drawn:
    dh = draws.human.draw(h, bounds)
    if jl is None:
        return _Drawn(dh, None, None, dataclasses.replace(draws, human=dh.after))
    dj = draws.judge.draw(jl, bounds)
    dg = draws.judge_only.draw(ju, bounds)
    return _Drawn(dh, dj, dg, TableDraws(draws.size, dh.after, dj.after, dg.after))


def _split(obs: EffectiveObservations, h, jl, blocks, rhos, judge_seen, wor: _Drawn | None = None) -> EffectiveObservations:
    """The split form of ``obs`` (:func:`effective_observations`); with ``wor`` the losses enter through their
    finite-population transforms (c stays the mean of the judge labels themselves) and each step's largest bet through
    its known range."""
    lo, hi = obs.loss_bounds
    batch, n = h.shape[:-1], h.shape[-1]
    prior_sum, prior_count = (0.5 * (lo + hi), 1) if judge_seen is None else judge_seen
    prior_sum = np.broadcast_to(np.asarray(prior_sum, dtype=np.float64), batch)
    if jl is None:  # R-Eval: no judge, no second factor
        c = np.zeros(batch + (n,))
        step_sum, per_step = np.zeros(batch + (n,)), 0
    else:
        step_sum = jl + blocks.sum(axis=-1)  # the judge labels of each step
        per_step = 1 + blocks.shape[-1]
        before = np.cumsum(step_sum, axis=-1) - step_sum  # judge labels of the earlier steps only
        c = (prior_sum[..., None] + before) / (prior_count + per_step * np.arange(n))
    rho = rhos[:, None]
    jbar = c if blocks is None else blocks.mean(axis=-1)
    j = c if jl is None else jl
    if wor is None:
        x = h[..., None, :] - rho * (j - c)[..., None, :]
        b = rho * (jbar - c)[..., None, :]
        # a bet that keeps both factors >= 0 at every target >= lo: 1 / (hi - lo + rho (c - lo)); R-Eval's single
        # factor keeps the classic 1 / (hi - target), rescaled with the target
        tops = np.where(rhos[:, None] > 0, hi - lo + rho * (c[..., None, :] - lo), hi)
    else:
        x, b, tops = _split_drawn(wor, c, rho, lo, blocks)
    cap_target = np.where(rhos > 0, lo, np.inf)
    return dataclasses.replace(obs, parts=np.stack([x, b], axis=-1), tops=tops, cap_target=cap_target,
                               judge_sum=prior_sum + step_sum.sum(axis=-1), judge_count=prior_count + per_step * n)


def _split_drawn(wor: _Drawn, c, rho, lo, blocks):
    """The split factors of draws without replacement: x = Y^h - rho (Y^j - c), b = rho (mean of the block's Y^g - c),
    and the smallest top that keeps both factors >= 0 at every target >= lo (each Y lies in a range known before its
    draw)."""
    hy, hh = wor.h.y[..., None, :], wor.h.high[..., None, :]
    if wor.j is None:  # R-Eval: one factor, its top the human stream's
        shape = hy.shape[:-2] + (rho.shape[0], hy.shape[-1])
        return np.broadcast_to(hy, shape).copy(), np.zeros(shape), np.broadcast_to(hh, shape).copy()
    cc = c[..., None, :]
    x = hy - rho * (wor.j.y[..., None, :] - cc)
    g = wor.g.y.reshape(blocks.shape).mean(axis=-1)[..., None, :]
    b = rho * (g - cc)
    x_top = hh - rho * (wor.j.low[..., None, :] - cc)
    b_top = rho * (wor.g.high.reshape(blocks.shape).max(axis=-1)[..., None, :] - cc)
    # rho = 0 rows are R-Eval's factor (cap taken at the target: the top of Y^h); rho > 0 rows cap at lo
    return x, b, np.where(rho > 0, np.maximum(x_top, lo + b_top), hh)


def component_log_evalues(
    obs: EffectiveObservations,
    alpha,
    *,
    delta: float,
    betting,
    horizon: int,
    ci_scale: bool = False,
    state: BettingState | None = None,
    return_state: bool = False,
    test_alpha=None,
):
    """log E_{s,i} (eq. 12) for every rho, shape (..., S, n).

    ``alpha``: a scalar or one target per batch element (bisection of confidence bounds). ``betting``: a strategy, its
    name or mapping (:func:`~certsel.policies.betting.get_strategy`). ``ci_scale`` bounds bets by 1/(M_s - m_s) instead
    of 1/(M_s - alpha) (App. D.5). ``state`` continues earlier rounds' bets (the path then holds only the new
    increments' cumulative sum). ``test_alpha`` (default ``alpha``) is the target of the test, on which the strategy's
    prior may depend (:func:`bet_context`): a bound inverting the test evaluates it at other targets with the test's own
    prior.
    """
    strategy = get_strategy(betting)
    q2, a, scale = _rows(obs, alpha, ci_scale)
    context = None if ci_scale else bet_context(obs, alpha if test_alpha is None else test_alpha)
    logf, new = strategy.log_factors(q2, a, scale, BettingState() if state is None else state, delta=delta,
                                     horizon=horizon, context=context)
    path = np.cumsum(logf, axis=-1).reshape(obs.q.shape)
    return (path, new) if return_state else path


def _rows(obs: EffectiveObservations, alpha, ci_scale: bool):
    """The observations as strategy rows (rows, n) with each row's target and bet scale: 1/(M_s - alpha) for testing
    (eq. 6), 1/(M_s - m_s) for intervals (App. D.5). The split form (testing only) gives its two factors per step in
    units of the step's largest bet (rows, n, 2), with target 0 and scale 1."""
    q = obs.q
    batch, (S, n) = q.shape[:-2], q.shape[-2:]
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64)[..., None], batch + (S,))
    if obs.split and not ci_scale:
        y = split_units(obs, a)
        rows = int(np.prod(batch + (S,)))
        return y.reshape(rows, n, 2), np.zeros(rows), np.ones(rows)
    if ci_scale:
        scale = np.broadcast_to(1.0 / (obs.upper - obs.lower), batch + (S,))
    else:
        scale = 1.0 / (obs.upper - a)
    return q.reshape(-1, n), np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(scale).reshape(-1)


def bet_context(obs: EffectiveObservations, test_alpha) -> BetContext:
    """The strategy rows' :class:`~certsel.policies.betting.BetContext`: the test's target in units of the loss range,
    and whether the row's rho is above 0. Fixed by the test, not by the data or by the target a bound evaluates."""
    lo, hi = obs.loss_bounds
    batch, S = obs.q.shape[:-2], obs.q.shape[-2]
    theta = np.broadcast_to((np.asarray(test_alpha, dtype=np.float64) - lo) / (hi - lo), batch)
    controlled = np.broadcast_to(obs.lower < lo, batch + (S,))  # lower = lo - rho (hi - lo)
    return BetContext(np.repeat(theta.reshape(-1), S), controlled.reshape(-1).copy())


def split_units(obs: EffectiveObservations, target) -> np.ndarray:
    """The split factors at ``target`` (batch + (S,)) in units of each step's largest bet:
    ((x - target) / d, b / d) with d = max(top - min(target, cap_target), eps), (..., S, n, 2)."""
    t = np.asarray(target, dtype=np.float64)[..., None]
    d = np.maximum(obs.tops - np.minimum(t, obs.cap_target[:, None]), MIN_RANGE)
    x, b = obs.parts[..., 0], obs.parts[..., 1]
    return np.stack([(x - t) / d, b / d], axis=-1)


def decision_fractions(obs: EffectiveObservations, alpha: float, *, delta: float, betting, horizon: int) -> np.ndarray:
    """The bet fractions u_{s,i} (..., S, n) of the test of H0: R > alpha on ``obs``: what its e-values and the bound
    that inverts it (:func:`decision_upper_bound`) are made of."""
    q2, a, scale = _rows(obs, alpha, False)
    u, _ = get_strategy(betting).checked_fractions(q2, a, scale, BettingState(), delta=delta, horizon=horizon,
                                                   context=bet_context(obs, alpha))
    return u.reshape(obs.q.shape)


def mix_log_evalues(log_components: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """log sum_s w_{s,0} E_{s,i}: the R-AutoEval+ e-value (eq. 11 with the weights of eq. 13), a shifted log-sum-exp
    over the rho axis."""
    if log_components.shape[-2] == 1:
        return log_components[..., 0, :].copy()
    z = log_components + np.log(weights)[:, None]
    top = z.max(axis=-2)
    z -= top[..., None, :]
    np.exp(z, out=z)
    return np.log(z.sum(axis=-2)) + top


def judge_agreement(human, judge_labeled) -> dict:
    """How well the judge's losses track the human ones on the labelled items.

    ``agreement``: fraction of items with both on the same side of 1/2; ``kappa``: Cohen's kappa of those verdicts (None
    when either side is constant); ``mean_abs_diff``: mean |judge - human|. A bad judge costs labels, never validity.
    """
    from sklearn.metrics import cohen_kappa_score

    h = np.asarray(human, dtype=np.float64)
    j = np.asarray(judge_labeled, dtype=np.float64)
    if h.shape != j.shape or h.size == 0:
        raise ValueError("human and judge_labeled must be non-empty and of one shape")
    hb, jb = h >= 0.5, j >= 0.5
    # kappa is undefined when either side gives one verdict only (no chance agreement to correct)
    constant = np.all(hb == hb[0]) or np.all(jb == jb[0])
    kappa = None if constant else float(cohen_kappa_score(hb, jb))
    return {"agreement": float(np.mean(hb == jb)), "kappa": kappa, "mean_abs_diff": float(np.mean(np.abs(h - j))),
            "items": int(h.size)}


def mixture_weights(log_components: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """The exponential weights of eq. (13), w_{s,n+1} ∝ w_{s,0} E_{s,n}, from log e-values along ``axis`` (the rho
    axis)."""
    shape = [1] * np.ndim(log_components)
    shape[axis] = -1
    z = log_components + np.log(weights).reshape(shape)
    z = np.exp(z - z.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def predictable_mixture(q: np.ndarray, log_components: np.ndarray, weights: np.ndarray,
                        log_before: np.ndarray | None = None) -> np.ndarray:
    """Per-label observations of the unbiased R-AutoEval+ point estimate, shape (..., n).

    Label i's observation is sum_s w_{s,i} q_{s,i} with the eq. (13) weights *before* label i (∝ w_{s,0} E_{s,i-1}).
    They are predictable and every q_s is unbiased for R (eq. 10), so each observation has conditional mean R (weights
    after label i would favour the rho whose observations happened to be low). ``q``, ``log_components``: (..., S, n);
    ``log_before`` (..., S): log E_s before the first of these labels (default 0).
    """
    before = np.zeros(log_components.shape[:-1]) if log_before is None else log_before
    prev = np.concatenate([before[..., None], log_components[..., :-1]], axis=-1)
    return np.sum(mixture_weights(prev, weights, axis=-2) * q, axis=-2)


def running_mean(x: np.ndarray, t_grid) -> np.ndarray:
    """Means of the first t entries of the last axis, for every t in ``t_grid`` (1-based)."""
    t = np.asarray(t_grid)
    return np.cumsum(x, axis=-1)[..., t - 1] / t


def check_horizon(horizon, n: int, past: bool = False) -> int:
    """The planned number of human labels (default ``n``), at least ``n`` unless ``past``: the bets stay valid past the
    horizon (the UP prior is then a discrete-prior mixture, WSR's bet keeps its formula), which a continued claim's test
    needs (workers/claims.py: its horizon is fixed at the claim's first test, a later run's budget goes further)."""
    horizon = n if horizon is None else check_positive_int(horizon, "horizon")
    if horizon < n and not past:
        raise ValueError(f"horizon={horizon} is smaller than the number of observations n={n}")
    return horizon


def _prepare(human, judge_labeled, judge_unlabeled, rhos, loss_bounds, weights, betting, horizon,
             observation: str = "paper", sampling: Sampling = IID(), past_horizon: bool = False):
    """Validated effective observations, mixture weights, strategy and horizon for one call."""
    obs = effective_observations(human, judge_labeled, judge_unlabeled, rhos=rhos, loss_bounds=loss_bounds,
                                 observation=observation, sampling=sampling)
    w = check_weights(weights, obs.q.shape[-2])
    return obs, w, get_strategy(betting), check_horizon(horizon, obs.q.shape[-1], past_horizon)


def log_evalue_paths(
    human,
    judge_labeled=None,
    judge_unlabeled=None,
    *,
    alpha: float,
    delta: float,
    rhos=DEFAULT_RHOS,
    betting: str | dict | BettingStrategy = "up",
    loss_bounds=(0.0, 1.0),
    weights=None,
    horizon: int | None = None,
    bet_bound: str = "target",
    observation: str = "paper",
    sampling: Sampling = IID(),
    past_horizon: bool = False,
) -> np.ndarray:
    """log E_1..E_n of the R-AutoEval+ e-process for H0: R > alpha vs H1: R <= alpha.

    Batched over leading axes; the result has the shape of ``human``. Arguments: :func:`evalue_path`. ``bet_bound``
    "target" bounds bets by 1/(M_s - alpha) (eq. 6, testing); "range" by 1/(M_s - m_s), the interval form of App. D.5,
    whose e-values are non-decreasing in alpha. ``past_horizon``: more labels than ``horizon`` (:func:`check_horizon`).
    """
    delta = check_level(delta, "delta")
    alpha = check_target(alpha, check_bounds(loss_bounds))
    if bet_bound not in ("target", "range"):
        raise ValueError(f"bet_bound must be 'target' or 'range', got {bet_bound!r}")
    if bet_bound == "range" and observation == "split":
        raise ValueError("bet_bound 'range' (intervals) takes the paper observation")
    obs, w, betting, horizon = _prepare(
        human, judge_labeled, judge_unlabeled, rhos, loss_bounds, weights, betting, horizon, observation, sampling,
        past_horizon)
    comps = component_log_evalues(obs, alpha, delta=delta, betting=betting, horizon=horizon,
                                  ci_scale=bet_bound == "range")
    return mix_log_evalues(comps, w)


def evalue_paths(human, judge_labeled=None, judge_unlabeled=None, **kwargs) -> np.ndarray:
    """Batched e-value paths: ``exp`` of :func:`log_evalue_paths` (use the log form for long horizons; this may
    overflow)."""
    return np.exp(log_evalue_paths(human, judge_labeled, judge_unlabeled, **kwargs))


def evalue_path(human, judge_labeled=None, judge_unlabeled=None, *, alpha: float, delta: float, rhos=DEFAULT_RHOS,
                betting: str | dict | BettingStrategy = "up", **kwargs) -> np.ndarray:
    """Running e-values E_1..E_n of R-AutoEval+ (Algorithm 1) for one candidate.

    * human, judge_labeled: (n,) the candidate's losses against human labels and the judge's on the same items;
      judge_unlabeled: (N >= n,) the judge's losses on unlabelled items (judge inputs None for R-Eval).
    * alpha: the e-process tests H0: R > alpha against H1: R <= alpha. delta: certified once E_i >= 1/delta (eq. 5), at
      any i, with optional stopping (Ville's inequality).
    * rhos: reliance factors (eq. 9); default 10 evenly spaced in [0, 1] (R-AutoEval+), ``[0]`` R-Eval, ``[1]``
      R-AutoEval. weights: initial mixture weights w_{s,0} (default 1/S).
    * betting: a name in :data:`~certsel.policies.bets.BETS` (``"up"``: Universal Portfolio, eq. 19; ``"wsr"``:
      eq. 20-21; ``"ons"``: online Newton step), a mapping ``{"kind": "up", "prior": "grid"}`` or an instance.
    * horizon: planned number of human labels (the ``n`` of eq. 20, the UP quadrature size); default ``len(human)``.
    * observation: ``"paper"`` (eq. 10) or ``"split"`` (:func:`effective_observations`).
    * sampling: :class:`~certsel.policies.sampling.IID` (the risk of the labels' distribution) or
      ``WithoutReplacement(N)`` (the mean of a table of N items, exactly; :mod:`certsel.policies.sampling`).
    """
    h = np.asarray(human, dtype=np.float64)
    if h.ndim != 1:
        raise ValueError(f"evalue_path takes 1-D human losses, got shape {h.shape}; use evalue_paths")
    return evalue_paths(
        human, judge_labeled, judge_unlabeled, alpha=alpha, delta=delta, rhos=rhos, betting=betting, **kwargs
    )


@dataclass(frozen=True)
class TestResult:
    """Outcome of the anytime-valid test for each batch element.

    ``certified``: max_i E_i >= 1/delta; ``labels_to_certify``: the first such i (1-based), 0 if never;
    ``max_log_evalue``: log max_i E_i.
    """

    certified: np.ndarray
    labels_to_certify: np.ndarray
    max_log_evalue: np.ndarray
    log_evalues: np.ndarray


def certify(human, judge_labeled=None, judge_unlabeled=None, *, alpha, delta, **kwargs) -> TestResult:
    """Run the test T_n = 1(max_{i<=n} E_i >= 1/delta) of Algorithm 1 on a batch."""
    log_e = log_evalue_paths(human, judge_labeled, judge_unlabeled, alpha=alpha, delta=delta, **kwargs)
    return test_from_log_evalues(log_e, delta)


def test_from_log_evalues(log_e: np.ndarray, delta: float) -> TestResult:
    """Certification decisions from log e-value paths (..., n) at level delta."""
    delta = check_level(delta, "delta")
    hit = log_e >= np.log(1.0 / delta)
    certified = hit.any(axis=-1)
    first = np.where(certified, hit.argmax(axis=-1) + 1, 0)
    return TestResult(certified, first, log_e.max(axis=-1), log_e)


def upper_confidence_bound(human, judge_labeled=None, judge_unlabeled=None, *, delta: float, rhos=DEFAULT_RHOS,
                           betting: str | dict | BettingStrategy = "up", loss_bounds=(0.0, 1.0), weights=None,
                           horizon: int | None = None, sampling: Sampling = IID(),
                           past_horizon: bool = False) -> np.ndarray:
    """Anytime-valid upper confidence bound on R at level 1 - delta (App. D.5), with the strategy's
    :meth:`~certsel.policies.betting.BettingStrategy.interval_strategy` (``past_horizon``: more labels than ``horizon``
    are allowed, as :func:`check_horizon` says).

    ``U_n = inf{a : max_{i<=n} E_i(a) >= 1/delta}``. With bets bounded by 1/(M_s - m_s) (independent of the target)
    every E_i(a) is non-decreasing in a, so the confidence set is an interval and bisection finds its end (the upper end
    of the final bracket: conservative). P(exists n: R > U_n) <= delta by Ville's inequality at a = R.
    """
    delta = check_level(delta, "delta")
    obs, w, betting, horizon = _prepare(
        human, judge_labeled, judge_unlabeled, rhos, loss_bounds, weights, betting, horizon, sampling=sampling,
        past_horizon=past_horizon)
    if not betting.monotone_in_target:
        raise ValueError(f"betting {betting.name!r} bets depend on the target, so its rejected targets need not "
                         f"form an interval; use {betting.name}.interval_strategy() for confidence bounds")
    # interval form: a prior that does not move with the target (for UP, eq. 19's Beta(1/2, 1/2))
    return _bisect_upper(obs, w, betting.interval_strategy(), horizon, level=delta)


def _bisect_upper(obs, w, betting, horizon, *, level) -> np.ndarray:
    """inf{a : max_i E_i(a) >= 1/level} by bisection over the range-scaled e-processes of App. D.5
    (:attr:`monotone_in_target` strategies only); returns the upper end of the final bracket, a rejected target."""
    lo, hi = obs.loss_bounds
    threshold = np.log(1.0 / level)
    batch = obs.q.shape[:-2]

    def rejected(a):
        comps = component_log_evalues(obs, a, delta=level, betting=betting, horizon=horizon, ci_scale=True)
        return mix_log_evalues(comps, w).max(axis=-1) >= threshold

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
