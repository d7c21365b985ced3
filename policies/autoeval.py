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

from dataclasses import dataclass

import numpy as np

from ._validation import (
    check_bounds,
    check_level,
    check_positive_int,
    check_target,
    check_weights,
)
from .betting import BetContext, BettingState, BettingStrategy, get_strategy
from .bounds import MIN_RANGE
from .sampling import IID, Sampling
from .observations import (DEFAULT_RHOS, OBSERVATIONS, EffectiveObservations,  # noqa: F401  (re-exported)
                           check_observation, effective_observations)

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
