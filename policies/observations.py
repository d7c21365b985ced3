"""The observations R-AutoEval+ bets on (eq. 8-10 of R-AutoEval+): from n human-labelled losses, the judge's losses on
the same items and on unlabelled ones, PPI++ effective observations for each reliance factor rho, in the paper's form
or the split form whose range is known before each draw (docs/statistics.md, "R-Eval, R-AutoEval, R-AutoEval+"); the
finite-population draws of a table sampled without replacement carried along."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._validation import check_bounds, check_losses, check_rhos
from .sampling import IID, Drawn, Sampling, TableDraws


DEFAULT_RHOS = np.linspace(0.0, 1.0, 10)  # R-AutoEval+'s reliance factors
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
