"""Judge-stratified testing: the judge first, then human labels where they tell the most.

The target is mu = (1/N) sum_i z_i, the mean human loss over the N items of the job's test set (as for Seq and Cer-Eval;
R-AutoEval+ targets the risk of the distribution the items are drawn from). The judge's loss is bought on every item
first; items are grouped into strata of the judge's loss (:func:`judge_strata`) and human labels are drawn without
replacement by :class:`~certsel.policies.stratified.StratifiedBetting` (stratum k with probability pi_k fixed from past
labels: proportional by default, Neyman-type with ``floor < 1``), whose observation Y_t with controls c_k has
conditional mean exactly mu given the past (:mod:`certsel.policies.stratified`). The controls c_k are
prediction-powered: they start at the judge's mean loss in the stratum (``prior_weight`` pseudo-labels) and move to the
stratum's human labels, so a good judge removes most of the variance from the first label on and a bad one costs labels,
never validity.

Y_t lies in [a_t, b_t], both fixed before draw t. The test of H0: mu > alpha bets on it:

    E_t = prod_{s<=t} (1 - u_s x_s),   x_s = (Y_s - alpha) / max(b_s - alpha, eps) <= 1,

with fractions u_s in [0, 1) from any registered strategy (:mod:`~certsel.policies.betting`) applied to x_s. Under H0
every factor has conditional mean 1 - u_s (mu - alpha)/(b_s - alpha) <= 1, so (E_t) is a test supermartingale and
P(exists t: E_t >= 1/delta) <= delta (Ville) under optional stopping and for any strata, allocations and controls chosen
from the past. When b_s <= alpha the draw cannot bring the mean above alpha (mu <= b_s surely), and the bet may be as
large as 1/eps. The one-sided bound (:meth:`StratifiedTest.upper_bound`) re-evaluates the test's own bets at every
target (:mod:`certsel.policies.bounds`), so it is <= alpha exactly when the test certified, for every strategy. The
two-sided interval is the stratified betting confidence sequence of the same observations
(:class:`~certsel.policies.confseq.BettingCS`), at its own level.
"""

from __future__ import annotations


import numpy as np

from ._validation import check_level, check_positive_int, check_rhos, check_target
from .betting import BetContext, BettingState, BettingStrategy, bet_log_factors, get_strategy
from .bounds import MIN_RANGE, inverted_upper_bound
from .partition import _check_scores
from .stratified import StratifiedBetting

STRATIFIED_SCHEME = "judge-stratified"  # its policy.kind
DEFAULT_STRATA = 6
DEFAULT_PRIOR_WEIGHT = 10.0  # pseudo-labels at the judge's mean loss in each stratum
# pi_k >= floor * |P_k| / |P|. Proportional (1) by default: a test at small alpha is limited by the largest bet
# 1/(b - alpha), and moving labels to the rare strata raises b; on the TriviaQA frontier proportional allocation needed
# 2-4% fewer labels than floor 0.5 and 5-7% fewer than 0.25.
DEFAULT_FLOOR = 1.0
DEFAULT_RHOS = (0.0, 0.5, 1.0)
_FORMAT = 4  # 4: the default UP prior has one more node (the atom), so format-3 wealth does not fit


def judge_strata(scores, max_groups: int = DEFAULT_STRATA) -> np.ndarray:
    """Up to ``max_groups`` strata of contiguous judge-loss values of about equal mass; a group label per item, 0..K-1
    in increasing judge loss.

    Equal values share a stratum; a value with more than its share of the mass (a judge whose loss is 0 on most
    items) is a stratum of its own and the rest is split evenly, so the few items the judge flags are not lumped with
    the many it passes.
    """
    s = _check_scores(scores)
    k = check_positive_int(max_groups, "max_groups")
    values, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    if values.size <= k:
        return inverse.astype(np.int64)
    group = np.empty(values.size, dtype=np.int64)
    g, mass, left, groups_left = 0, 0, int(s.size), k
    for v, c in enumerate(counts):
        target = left / groups_left
        # close the open stratum before a value that would overshoot its share by more than it fills
        if mass > 0 and mass + c - target > target - mass and groups_left > 1:
            g, left, groups_left, mass = g + 1, left - mass, groups_left - 1, 0
            target = left / groups_left
        group[v] = g
        mass += c
        if mass >= target and groups_left > 1 and v + 1 < values.size:
            g, left, groups_left, mass = g + 1, left - mass, groups_left - 1, 0
    return group[inverse]


class StratifiedTest:
    """Anytime-valid test of H0: mu > alpha with judge-stratified human labels (module docstring).

    * judge_losses: (N,) the judge's loss on every item, in [0, 1]. Certified once E_t >= 1/delta.
    * horizon: the planned number of human labels (sizes the UP prior, WSR's bet). ci_delta: level of the two-sided
      interval (default delta).
    * max_groups, floor, prior_weight: strata (:func:`judge_strata`), the allocation floor (1: proportional, the
      default; below 1 labels move to strata where judge and humans disagree more), and the pseudo-labels behind each
      control.
    * futility: delta_f, or None: also run the mirrored test of H0': mu < alpha on the same observations (1 - Y against
      1 - alpha, range 1 - a); ``futile`` once it reaches 1/delta_f (evidence that mu >= alpha; it never certifies).
    """

    __test__ = False

    def __init__(self, judge_losses, *, alpha: float, delta: float, horizon: int, betting="up", seed: int = 0,
                 ci_delta: float | None = None, max_groups: int = DEFAULT_STRATA, floor: float = DEFAULT_FLOOR,
                 prior_weight: float = DEFAULT_PRIOR_WEIGHT, futility: float | None = None, rhos=DEFAULT_RHOS):
        j = _check_scores(judge_losses)
        if j.min() < 0.0 or j.max() > 1.0:
            raise ValueError(f"judge losses must lie in [0, 1], got values in [{j.min():.4g}, {j.max():.4g}]")
        self.alpha = check_target(alpha, (0.0, 1.0))
        self.delta = check_level(delta, "delta")
        self.horizon = check_positive_int(horizon, "horizon")
        self.ci_delta = self.delta if ci_delta is None else check_level(ci_delta, "ci_delta")
        self.strategy: BettingStrategy = get_strategy(betting)
        self.N = int(j.size)
        self.judge = j
        self.groups = judge_strata(j, max_groups)
        K = int(self.groups.max()) + 1
        sizes = np.bincount(self.groups, minlength=K)
        self.judge_means = np.bincount(self.groups, weights=j, minlength=K) / sizes
        self.rhos = check_rhos(rhos)
        self._top = int(np.argmax(self.rhos))
        self.design = StratifiedBetting(self.N, delta=self.ci_delta, rng=np.random.default_rng(seed), floor=floor,
                                        prior_weight=prior_weight, control_scales=self.rhos)
        self.design.set_partition(self.groups, np.zeros(self.N, dtype=np.int8), prior_mean=self.judge_means)
        self.state = BettingState()
        S = self.rhos.size
        # per control scale (rows): observations, their upper ends and the fractions bet on them, in draw order
        self._y = np.zeros((S, 0))
        self._b = np.zeros((S, 0))
        self._u = np.zeros((S, 0))
        self._log_wealth = np.zeros(S)  # each scale's log wealth; E_t is their mean
        self._futility_wealth = np.zeros(S)
        self.max_log_evalue = 0.0
        self.futility = None if futility is None else check_level(futility, "futility")
        self.futility_state = BettingState()
        self.futility_max_log_evalue = 0.0
        self.last_futility_path = np.zeros(0)  # its log E after each label of the last update (the budget stop)

    # -- drawing and labels -------------------------------------------------------------------
    def next_items(self, batch: int) -> np.ndarray:
        """Up to ``batch`` items to label next (never beyond the horizon or the test set)."""
        b = min(int(batch), self.horizon - self.design._drawn, self.N - self.design._drawn)
        return np.asarray(self.design.choose(b) if b > 0 else [], dtype=np.int64)

    def update(self, items, losses) -> np.ndarray:
        """Human losses of drawn items; returns log E after each draw that became complete."""
        items = np.asarray(items, dtype=np.int64)
        z = np.asarray(losses, dtype=np.float64)
        if items.shape != z.shape or items.ndim != 1:
            raise ValueError("items and losses must be 1-D arrays of one length")
        if np.any(~np.isfinite(z)) or np.any((z < 0.0) | (z > 1.0)):
            raise ValueError("human losses must lie in [0, 1]")
        rank = self.design.draw_rank(items)
        if np.any(rank < 0):
            raise ValueError("labels for items that were not drawn")
        got = self.design.observe_block(items, z)
        y, a, b = got.y_scaled, got.lo_scaled, got.hi_scaled  # (S, t)
        self.last_futility_path = np.zeros(0)
        if y.shape[1] == 0:
            return np.zeros(0)
        if self.futility is not None:  # mirrored: 1 - Y has mean 1 - mu and lies below 1 - a
            fpath, self.futility_state, _ = self._bet(normalised(1.0 - y, 1.0 - a, 1.0 - self.alpha),
                                                      self.futility_state, self.futility, 1.0 - self.alpha)
            fpath, self._futility_wealth = self._mix(fpath, self._futility_wealth)
            self.futility_max_log_evalue = max(self.futility_max_log_evalue, float(fpath.max()))
            self.last_futility_path = fpath
        path, self.state, u = self._bet(normalised(y, b, self.alpha), self.state, self.delta, self.alpha)
        path, self._log_wealth = self._mix(path, self._log_wealth)
        self.max_log_evalue = max(self.max_log_evalue, float(path.max()))
        self._y = np.concatenate([self._y, y], axis=1)
        self._b = np.concatenate([self._b, b], axis=1)
        self._u = np.concatenate([self._u, u], axis=1)
        return path

    @staticmethod
    def _mix(paths: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log of the uniform mixture over scales of the wealth after each draw, from each scale's log wealth ``before``
        and the cumulative log factors ``paths`` (S, t)."""
        wealth = before[:, None] + paths
        from scipy.special import logsumexp  # here, not at import: reading a job file needs no scipy
        return logsumexp(wealth, axis=0) - np.log(wealth.shape[0]), wealth[:, -1].copy()

    def _bet(self, x: np.ndarray, state: BettingState, delta: float, target: float):
        """The strategy's fractions on normalised observations x (S, t) (target 0, scale 1) of the test of ``target``:
        each scale's cumulative log factors, the state after them and the fractions."""
        one, zero = np.ones(x.shape[0]), np.zeros(x.shape[0])
        u, state = self.strategy.checked_fractions(x, zero, one, state, delta=delta, horizon=self.horizon,
                                                   context=self._context(target, x.shape[0] // self.rhos.size))
        return np.cumsum(bet_log_factors(u, x, zero, one), axis=-1), state, u

    def _context(self, target: float, copies: int = 1) -> BetContext:
        """Each row's test: its target, and whether its control scale is above 0, for ``copies`` stacked copies of the
        scales."""
        return BetContext.of(copies * self.rhos.size, target, np.tile(self.rhos > 0, copies))

    # -- reading ---------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Human labels fed to the test (complete draws)."""
        return int(self._y.shape[1])

    @property
    def log_evalue(self) -> float:
        """log E_t now: the uniform mixture over control scales of their wealths."""
        from scipy.special import logsumexp  # here, not at import: reading a job file needs no scipy
        return float(logsumexp(self._log_wealth) - np.log(self._log_wealth.size))

    @property
    def drawn(self) -> int:
        return int(self.design._drawn)

    @property
    def certified(self) -> bool:
        return self.max_log_evalue >= -np.log(self.delta)

    @property
    def observations(self) -> np.ndarray:
        """The observations Y_t with the largest control scale (full judge controls by default), in draw order."""
        return self._y[self._top].copy()

    @property
    def fractions(self) -> np.ndarray:
        """The bet fractions u_t the test used, (S, t) (what its bound re-uses)."""
        return self._u.copy()

    @property
    def estimate(self) -> float:
        """The mean of the observations with the largest control scale: unbiased for mu at a fixed number of labels."""
        return float(self._y[self._top].mean()) if self.n else float(np.dot(self.judge_means,
                                                                          np.bincount(self.groups) / self.N))

    def interval(self) -> tuple[float, float]:
        """The two-sided anytime-valid interval at ``ci_delta`` (stratified betting CS)."""
        _, _, lo, hi = self.design.bounds()
        return lo, hi

    def labelled(self) -> tuple[np.ndarray, np.ndarray]:
        """(items, human losses) of the complete draws, in draw order."""
        items = self.design._items[: self.n]
        return items.copy(), self.design._loss[items].copy()

    def upper_bound(self, level: float, *, recorded: bool = True) -> float:
        """inf{a : max_t E_t(a) >= 1/level}: the one-sided bound that inverts this test.

        With the test's fractions u_t kept, prod (1 - u_t (Y_t - a) / max(b_t - a, eps)) is valid for the null mu >= a
        at every a and non-decreasing in a; above alpha a mixture of constant bets (UP, with the prior of the test at
        alpha) re-chooses its bets per target (:mod:`certsel.policies.bounds`). P(mu > U) <= level, and U <= alpha
        exactly when the test at alpha reached 1/level, for every strategy. ``recorded=False`` recomputes the decision
        at alpha from the fractions instead of reading the recorded evidence (a check).
        """
        level = check_level(level, "level")
        if self.n == 0:
            return 1.0

        def family(a, rows):  # the strategy's own test at targets a (points, 1), with the prior of the test at alpha
            x = normalised(self._y[None], self._b[None], a[:, :, None])  # (points, S, n)
            points, S, n = x.shape
            flat = x.reshape(points * S, n)
            one, zero = np.ones(flat.shape[0]), np.zeros(flat.shape[0])
            u, _ = self.strategy.checked_fractions(flat, zero, one, BettingState(), delta=self.delta,
                                                   horizon=self.horizon, context=self._context(self.alpha, points))
            paths = np.cumsum(bet_log_factors(u, flat, zero, one), axis=-1).reshape(points, S, n)
            from scipy.special import logsumexp  # here, not at import: reading a job file needs no scipy
            return (logsumexp(paths, axis=1) - np.log(S)).max(axis=-1)[:, None]

        return float(inverted_upper_bound(self._y[None], self._b[None], self._u[None], self.alpha,
                                          level=level,
                                          rejected=self.max_log_evalue >= -np.log(level) if recorded else None,
                                          family=family if self.strategy.constant_bet_mixture else None)[0])

    # -- snapshot ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"format": _FORMAT, "design": self.design.state_dict(), "state": self.state.to_dict(),
                "y": self._y.copy(), "b": self._b.copy(), "u": self._u.copy(), "rhos": self.rhos.copy(),
                "log_wealth": self._log_wealth.copy(), "futility_wealth": self._futility_wealth.copy(),
                "max_log_e": self.max_log_evalue,
                "alpha": self.alpha, "delta": self.delta, "horizon": self.horizon, "n_items": self.N,
                "rng": self.design.rng.bit_generator.state, "futility_state": self.futility_state.to_dict(),
                "futility_max_log_e": self.futility_max_log_evalue}

    def load_state_dict(self, state: dict) -> None:
        if (state.get("format") != _FORMAT or state.get("alpha") != self.alpha or state.get("delta") != self.delta
                or state.get("horizon") != self.horizon or state.get("n_items") != self.N
                or not np.array_equal(np.asarray(state.get("rhos"), dtype=np.float64).reshape(-1), self.rhos)):
            raise ValueError("the snapshot is not of this judge-stratified test")
        self.design.load_state_dict(state["design"])
        self.design.rng.bit_generator.state = state["rng"]
        self.state = BettingState.from_dict(state["state"])
        S = self.rhos.size
        self._y = np.asarray(state["y"], dtype=np.float64).reshape(S, -1)
        self._b = np.asarray(state["b"], dtype=np.float64).reshape(S, -1)
        self._u = np.asarray(state["u"], dtype=np.float64).reshape(S, -1)
        self._log_wealth = np.asarray(state["log_wealth"], dtype=np.float64).reshape(S)
        self._futility_wealth = np.asarray(state["futility_wealth"], dtype=np.float64).reshape(S)
        self.max_log_evalue = float(state["max_log_e"])
        self.futility_state = BettingState.from_dict(state["futility_state"])
        self.futility_max_log_evalue = float(state["futility_max_log_e"])


def normalised(y: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """x = (Y - alpha) / max(b - alpha, eps) <= 1: the observation in units of the largest bet that keeps every factor
    1 - u x non-negative."""
    return (y - alpha) / np.maximum(b - alpha, MIN_RANGE)
