"""Recovery: certify that a candidate keeps at least a share r of a reference model's score.

Accuracy recovery is the compressed model's mean score over the reference's, Rec = E[s] / E[s_ref]. certsel certifies
Rec >= r with its anytime-valid risk tests, on one bounded observation per item: with scores s, s_ref in [0, 1] and
r > 0,

    l_i = (r s_ref,i - s_i + 1) / (1 + r)  in [0, 1],
    E[l] <= alpha_r = 1 / (1 + r)   <=>   E[s] >= r E[s_ref]   <=>   Rec >= r   (E[s_ref] > 0).

So a recovery test is a risk test on l at alpha_r (:class:`Recovery`): every policy, strategy and procedure applies
unchanged, with the same guarantee (P(certify Rec >= r) <= delta when Rec < r, at any stopping time). Unlike the drop
max(s_ref - s, 0), the observation is signed: an item where the candidate beats the reference counts in its favour.

The bound (:func:`recovery_lower_bound`) inverts the family of tests over r' that keeps the decision test's fractions
u_i: the bet u_i / (1 - alpha_r) on l_i - alpha_r is, at r', the factor

    1 - u_i (s_ref,i - s_i / r')   >= 1 - u_i >= 0,

with conditional mean 1 - u_i E[s_ref] (1 - Rec / r') <= 1 whenever Rec <= r': a test supermartingale for H0': Rec < r'
at every r', non-increasing in r' (s_i >= 0). The rejected r' form an interval (0, L], P(Rec < L) <= level, and L >= r
exactly when the test at r certified. Only R-Eval's test (one component) has this form; a judge-assisted test's
certificate is its decision at r (docs/statistics.md, "Recovery").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import check_level
from .autoeval import _prepare, decision_fractions
from .bounds import _search

# the search for the bound brackets r' in (0, _R_MAX]: recoveries above 100 are not a claim anyone makes
_R_MAX = 100.0


def _scores(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} scores must be finite and non-empty")
    if a.min() < 0.0 or a.max() > 1.0:
        raise ValueError(f"{name} scores must lie in [0, 1], got values in [{a.min():.6g}, {a.max():.6g}]")
    return a


@dataclass(frozen=True)
class Recovery:
    """The claim Rec = E[score] / E[reference score] >= ``at_least`` as a risk test (module docstring)."""

    at_least: float

    def __post_init__(self):
        r = self.at_least
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0.0 < r <= _R_MAX:
            raise ValueError(f"recovery must be a number in (0, {_R_MAX:g}], got {r!r}")

    @property
    def alpha(self) -> float:
        """The risk target alpha_r = 1 / (1 + r) of the equivalent test."""
        return 1.0 / (1.0 + self.at_least)

    def losses(self, score, reference) -> np.ndarray:
        """l = (r s_ref - s + 1) / (1 + r) in [0, 1], elementwise (any shape, paired)."""
        s, ref = _scores(score, "candidate"), _scores(reference, "reference")
        if s.shape != ref.shape:
            raise ValueError(f"candidate and reference scores must be paired, got shapes {s.shape} and {ref.shape}")
        r = float(self.at_least)
        return np.clip((r * ref - s + 1.0) / (1.0 + r), 0.0, 1.0)  # the clip only absorbs rounding


def recovery_of(score, reference, axis=-1) -> np.ndarray:
    """Rec = mean(score) / mean(reference) along ``axis`` (nan where the reference's mean is 0)."""
    s, ref = _scores(score, "candidate"), _scores(reference, "reference")
    den = ref.mean(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, s.mean(axis=axis) / np.where(den > 0, den, 1.0), np.nan)


def _log_wealth(score, reference, u, r, n_used) -> np.ndarray:
    """log max_{t <= n_used} prod_{i <= t} (1 - u_i (s_ref,i - s_i / r')) for targets r' (points, rows) on rows of
    (rows, n) scores and fractions."""
    r = np.asarray(r, dtype=np.float64)[..., None]  # (points, rows, 1)
    with np.errstate(divide="ignore"):
        path = np.cumsum(np.log1p(-np.minimum(u * (reference - score / r), 1.0)), axis=-1)
    n = score.shape[-1]
    path = np.where(np.arange(n) < n_used[:, None], path, -np.inf)
    return path.max(axis=-1) if n else np.zeros(r.shape[:-1])


def recovery_lower_bound(score, reference, fractions, *, at_least: float, level: float, rejected=None,
                         n_used=None) -> np.ndarray:
    """L = sup{r' : the same-bets test at r' rejects Rec < r'} (module docstring), per row; P(Rec < L) <= level.

    ``score``, ``reference`` (..., n): the labelled items' scores in purchase order; ``fractions`` (..., n): the u_i of
    the test at ``at_least`` (:func:`~certsel.policies.autoeval.decision_fractions` of R-Eval on
    :meth:`Recovery.losses`); ``rejected`` (...): the test's recorded decision at ``level``, seeding the search so that
    L >= at_least exactly when it is true (default: recomputed); ``n_used``: labels per row (default all). L is the
    lower end of the final bracket (a rejected r', or at_least), low by at most at_least / 2**32 or
    (100 - at_least) / 2**32; a row rejecting r' = 100 gets 100.
    """
    level = check_level(level, "level")
    r0 = Recovery(at_least).at_least
    s, ref = _scores(score, "candidate"), _scores(reference, "reference")
    u = np.asarray(fractions, dtype=np.float64)
    if not s.shape == ref.shape == u.shape:
        raise ValueError(f"scores, reference scores and fractions must share a shape, got {s.shape}, {ref.shape}, "
                         f"{u.shape}")
    if np.any((u < 0.0) | (u > 1.0)):
        raise ValueError("bet fractions must lie in [0, 1]")
    batch, n = s.shape[:-1], s.shape[-1]
    rows = int(np.prod(batch))
    s, ref, u = s.reshape(rows, n), ref.reshape(rows, n), u.reshape(rows, n)
    used = np.full(rows, n) if n_used is None else np.broadcast_to(np.asarray(n_used), batch).reshape(rows)
    thr = -math.log(level)

    def rejects(idx):
        # searched on t = -r', along which rejection is non-decreasing (the family rejects every r' below L)
        return lambda t: _log_wealth(s[idx], ref[idx], u[idx], -t, used[idx]) >= thr

    if rejected is None:
        rej = _log_wealth(s, ref, u, np.full((1, rows), r0), used)[0] >= thr
    else:
        rej = np.broadcast_to(np.asarray(rejected, dtype=bool), batch).reshape(rows)
    out = np.empty(rows)
    passed, failed = np.flatnonzero(rej), np.flatnonzero(~rej)
    # certified rows look for L in [r0, 100], the others in (0, r0]; the bracket's upper end in t is its
    # lower end in r': a rejected r' (or r0 itself), so L errs low
    out[passed] = -_search(rejects(passed), np.full(passed.size, -_R_MAX), np.full(passed.size, -r0))
    out[failed] = -_search(rejects(failed), np.full(failed.size, -r0), np.full(failed.size, 0.0))
    if passed.size:  # rejected all the way up: report the top of the search
        top = _log_wealth(s[passed], ref[passed], u[passed], np.full((1, passed.size), _R_MAX), used[passed])[0] >= thr
        out[passed[top]] = _R_MAX
    return out.reshape(batch)


def recovery_decision_bound(score, reference, *, at_least: float, level: float, delta: float, betting="up",
                            horizon: int | None = None, max_log_evalue=None, n_used=None,
                            observation: str = "split", past_horizon: bool = False) -> np.ndarray:
    """The lower bound on the recovery that inverts R-Eval's own test of Rec >= ``at_least``.

    R-Eval's fractions on :meth:`Recovery.losses` at alpha_r (:func:`~certsel.policies.autoeval.decision_fractions`,
    sized for ``delta`` and ``horizon`` as in the job) are kept for every r' (:func:`recovery_lower_bound`); the
    recorded ``max_log_evalue`` seeds the bound, so that L >= at_least exactly when the test reached 1/level
    (``past_horizon``: a continued claim's test, more labels than its horizon).
    """
    claim = Recovery(at_least)
    losses = claim.losses(score, reference)
    obs, _, strategy, horizon = _prepare(losses, None, None, (0.0,), (0.0, 1.0), None, betting, horizon, observation,
                                         past_horizon=past_horizon)
    u = decision_fractions(obs, claim.alpha, delta=delta, betting=strategy, horizon=horizon)[..., 0, :]
    rejected = None
    if max_log_evalue is not None:
        rejected = np.asarray(max_log_evalue, dtype=np.float64) >= -math.log(check_level(level, "level"))
    return recovery_lower_bound(score, reference, u, at_least=at_least, level=level, rejected=rejected,
                                n_used=n_used)
