"""Anytime-valid betting confidence sequence for a mean, from observations with predictable ranges.

Setting. Observations Y_1, Y_2, ... satisfy E[Y_t | past] = mu for one unknown number mu, and Y_t lies in a range [a_t,
b_t] known before Y_t is drawn: i.i.d. bounded losses (a_t = 0, b_t = 1), sampling without replacement from a finite
test set, and the stratified inverse-probability observations of :mod:`certsel.policies.stratified`.

Construction: the hedged capital process of Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
betting" (JRSS-B 2024, arXiv:2010.09686, section 4), extended to predictable ranges. For every candidate mean m, two
gamblers bet on the sign of Y - m:

    K+_t(m) = prod_{s<=t} (1 + l+_s(m) (Y_s - m)),    l+_s(m) = min(l_s, c / (m - a_s))
    K-_t(m) = prod_{s<=t} (1 - l-_s(m) (Y_s - m)),    l-_s(m) = min(l_s, c / (b_s - m))

with c < 1 and a bet size l_s >= 0 fixed before Y_s is seen. Every factor is at least 1 - c > 0, and at m = mu it has
conditional mean 1, so K+(mu) and K-(mu) are nonnegative martingales; Ville's inequality gives P(exists t:
K+_t(mu) >= 1/alpha) <= alpha, whatever the stopping rule. Each factor is non-increasing in m (for m <= a_s it is
1 + l_s (Y_s - m); above a_s with the cap active it is 1 - c + c (Y_s - a_s)/(m - a_s), and Y_s >= a_s), so the rejected
means {m : max_{s<=t} K+_s(m) >= 1/alpha} form an interval at the bottom. Its upper end L_t is a lower confidence bound:
P(exists t: mu < L_t) <= alpha. The upper bound U_t comes from K- in the same way.

Two levels are kept at once: one-sided bounds at ``delta`` (threshold decisions such as "R <= alpha") and the two-sided
interval at ``delta`` (each end at delta/2), reading the same two capital processes against 1/delta and 2/delta.

Bet size: by default WSR's predictable plug-in with inverse-variance weights, l_s = sqrt(2 log(1/alpha_bet) / (I_s
log(1 + s))) / v_s, where v_s is the caller's prediction of Var(Y_s | past) (any positive predictable number keeps
validity) and I_s = sum_{r<=s} 1/v_r; with a constant v this is WSR's lambda_t^PrPl. A caller may give its own sizes per
gambler (``bets``, e.g. :class:`~certsel.policies.pair_bets.MarginBet`): the argument above asks of l_s only that it be
predictable, non-negative and the same for every m.

Numerics: the capital is kept on a grid of candidate means covering the current two-sided interval. A bound is reported
at a rejected grid point (conservative: the true bound lies between it and the next point). When the interval has shrunk
below a quarter of the grid's span (``_REGRID_FRACTION``), the grid is rebuilt inside it from the stored observations
(its points were never rejected, so only their current capital is needed, not its running maximum). Everything is
vectorised over a leading axis of independent sequences (replications, candidates, pairs).
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import check_level, check_positive_int

BET_CAP = 0.5  # c: every factor stays >= 1 - c; WSR recommend 1/2 or 3/4
GRID_SIZE = 512
_REGRID_FRACTION = 0.25  # rebuild the grid when the interval is below this fraction of its span
_MIN_SPACING = 1e-5  # no grid is rebuilt finer than this fraction of the range
_CHUNK = 1 << 20  # elements per block when the capital is recomputed from the history
_REGRID_STEP = 64  # observations summed at once when a grid is rebuilt
_FORMAT = 1
# The stored range check allows this much rounding (a_s <= Y_s <= b_s up to float error).
_RANGE_TOL = 1e-9


def _rows(x, B: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1 and B == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[0] != B:
        raise ValueError(f"{name} must have shape ({B}, t), got {np.shape(x)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _capital_increments(grid, y, a, b, lam, lam_m, cap):
    """log factors of K+ and K- for grid (B, 1, G) against observations (B, T, 1), with the bet sizes ``lam`` of K+ and
    ``lam_m`` of K- (B, T, 1)."""
    shape = np.broadcast_shapes(np.shape(grid), np.shape(y))
    dy = y - grid
    gap = grid - a  # the bet on "above m" is capped at c / (m - a) where m > a
    bet = np.full(shape, np.inf)
    np.divide(cap, gap, out=bet, where=gap > 0)
    np.minimum(bet, lam, out=bet)
    bet *= dy
    inc_p = np.log1p(bet, out=bet)
    np.subtract(b, grid, out=gap)  # the bet on "below m" is capped at c / (b - m) where m < b
    bet2 = np.full(shape, np.inf)
    np.divide(cap, gap, out=bet2, where=gap > 0)
    np.minimum(bet2, lam_m, out=bet2)
    bet2 *= dy
    np.negative(bet2, out=bet2)
    inc_m = np.log1p(bet2, out=bet2)
    return inc_p, inc_m


def _running_sums(start: np.ndarray, inc: np.ndarray) -> np.ndarray:
    """start (B, G) plus the running sums of inc (B, T, G) along T, in place in ``inc``: the numbers np.cumsum gives on
    [start, inc_1, ..., inc_T] (same additions, same order), without its slow walk along a middle axis."""
    inc[:, 0] += start
    if inc.shape[0] * inc.shape[2] < 4096:
        return np.cumsum(inc, axis=1, out=inc)
    for k in range(1, inc.shape[1]):
        np.add(inc[:, k - 1], inc[:, k], out=inc[:, k])
    return inc


def _lower_index(rejected: np.ndarray) -> np.ndarray:
    """Top of the longest rejected prefix along the last axis (-1 if the first point is not rejected)."""
    keep = ~rejected
    first_kept = np.argmax(keep, axis=-1)
    return np.where(keep.any(axis=-1), first_kept, rejected.shape[-1]) - 1


def _upper_index(rejected: np.ndarray) -> np.ndarray:
    """Bottom of the longest rejected suffix (G if the last point is not rejected)."""
    G = rejected.shape[-1]
    return G - 1 - _lower_index(rejected[..., ::-1])


class _Chunk:
    """The observations of one :meth:`BettingCS.update` call and how far each row has got."""

    def __init__(self, y, a, b, v, klo, khi, bets=None):
        self.y, self.a, self.b, self.v, self.klo, self.khi = y, a, b, v, klo, khi
        self.given = bets  # (2, B, T): the caller's sizes of K+ and K-, or None (the plug-in)
        B, T = y.shape
        self.pos = np.zeros(B, dtype=np.int64)  # next observation of each row
        self.lam = np.zeros((2, B, T))  # the sizes used, K+ then K-
        self.bounds = np.zeros((B, T, 4))


class BettingCS:
    """Lower/upper confidence sequences for ``n_seq`` independent means (see the module docstring).

    ``delta``: one-sided bounds hold with probability >= 1 - delta each, the two-sided interval with
    probability >= 1 - delta. ``bounds``: (lo, hi) known to contain the mean. ``bet_level``: the alpha_bet the bet sizes
    are tuned for (default delta/2, the two-sided interval; any value keeps validity). ``cap``: c in (0, 1).
    ``grid_size``: candidate means kept per sequence.
    """

    def __init__(self, n_seq: int = 1, *, delta: float, bounds=(0.0, 1.0), bet_level: float | None = None,
                 cap: float = BET_CAP, grid_size: int = GRID_SIZE):
        self.n_seq = check_positive_int(n_seq, "n_seq")
        self.delta = check_level(delta, "delta")
        lo, hi = (float(v) for v in bounds)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"bounds must be finite with lo < hi, got {bounds!r}")
        self.bounds = (lo, hi)
        self.bet_level = self.delta / 2.0 if bet_level is None else check_level(bet_level, "bet_level")
        if not 0.0 < float(cap) < 1.0:
            raise ValueError(f"cap must be in (0, 1), got {cap!r}")
        self.cap = float(cap)
        self.grid_size = check_positive_int(grid_size, "grid_size")
        if self.grid_size < 8:
            raise ValueError(f"grid_size must be >= 8, got {grid_size}")
        # thresholds on log capital: one-sided at delta, two-sided (each side at delta/2)
        self._thr = np.array([math.log(1.0 / self.delta), math.log(2.0 / self.delta)])
        B, G = self.n_seq, self.grid_size
        self.t = 0
        self._count = np.zeros(B, dtype=np.int64)  # observations fed, per sequence
        self._info = np.zeros(B)
        self._grid = np.tile(np.linspace(lo, hi, G), (B, 1))
        self._logp = np.zeros((B, G))
        self._logm = np.zeros((B, G))
        self._lower = np.full((B, 2), lo)  # columns: one-sided at delta, two-sided
        self._upper = np.full((B, 2), hi)
        self._hist: list[np.ndarray] = []  # (4, B, T) blocks: y, a, b, lam
        self.regrids = 0

    # -- reading -------------------------------------------------------------------------
    @property
    def lower(self) -> np.ndarray:
        """One-sided lower bounds at level delta, shape (n_seq,)."""
        return self._lower[:, 0].copy()

    @property
    def upper(self) -> np.ndarray:
        """One-sided upper bounds at level delta."""
        return self._upper[:, 0].copy()

    @property
    def interval(self) -> tuple[np.ndarray, np.ndarray]:
        """Two-sided interval at level delta (each end at delta/2)."""
        return self._lower[:, 1].copy(), self._upper[:, 1].copy()

    def history(self) -> np.ndarray:
        """(5, n_seq, t): the observations, their ranges and the bet sizes of K+ and K-, in order."""
        if not self._hist:
            return np.zeros((5, self.n_seq, 0))
        if len(self._hist) > 1:
            self._hist = [np.concatenate(self._hist, axis=2)]
        return self._hist[0]

    # -- feeding -------------------------------------------------------------------------
    def update(self, y, a, b, v, *, known_lo=None, known_hi=None, path: bool = False, bets=None):
        """Consume T observations per sequence, in order (arrays (n_seq, T), or (T,) for one sequence).

        ``a``/``b``: the ranges fixed before each draw; ``v``: predicted variances (> 0). ``known_lo``/``known_hi``
        (optional, (n_seq, T)): bounds on the mean known for certain after each observation (e.g. from the labelled part
        of a finite test set), intersected with the sequence. ``path=True`` returns the bounds after every observation,
        (n_seq, T, 4): one-sided lower, one-sided upper, two-sided lower, two-sided upper. ``bets`` (optional, (2,
        n_seq, T)): the caller's predictable sizes of K+ and K- (default: the plug-in of the module docstring).

        The result does not depend on how observations are split into calls or which sequences share a call: sums run in
        observation order and each grid is rebuilt after the same observation either way.
        """
        B = self.n_seq
        y, a, b, v = (_rows(x, B, n) for x, n in ((y, "y"), (a, "a"), (b, "b"), (v, "v")))
        T = y.shape[1]
        if not (a.shape == b.shape == v.shape == y.shape):
            raise ValueError("y, a, b and v must have the same shape")
        if np.any(v <= 0.0):
            raise ValueError("predicted variances v must be positive")
        tol = _RANGE_TOL * np.maximum(1.0, np.abs(b - a))
        if np.any(y < a - tol) or np.any(y > b + tol):
            raise ValueError("an observation lies outside the range fixed before its draw")
        klo = np.full((B, T), -np.inf) if known_lo is None else _rows(known_lo, B, "known_lo")
        khi = np.full((B, T), np.inf) if known_hi is None else _rows(known_hi, B, "known_hi")
        if klo.shape != y.shape or khi.shape != y.shape:
            raise ValueError("known_lo and known_hi must have the shape of y")
        if bets is not None:
            bets = np.asarray(bets, dtype=np.float64)
            if bets.shape != (2,) + y.shape:
                raise ValueError(f"bets must have shape (2, {B}, {T}), got {bets.shape}")
            if not np.all(np.isfinite(bets)) or np.any(bets < 0.0):
                raise ValueError("bet sizes must be finite and non-negative")
        y = np.minimum(np.maximum(y, a), b)  # only float rounding remains after the check above
        return self.feed(y, a, b, v, klo, khi, path, bets)

    def feed(self, y, a, b, v, klo, khi, path: bool = False, bets=None):
        """:meth:`update` without its input checks, for valid (n_seq, T) arrays (observations inside their ranges,
        v > 0, bets >= 0)."""
        B, T = y.shape
        if B == 1 and T == 1:
            given = None if bets is None else (float(bets[0, 0, 0]), float(bets[1, 0, 0]))
            out = self._advance_one(float(y[0, 0]), float(a[0, 0]), float(b[0, 0]), float(v[0, 0]),
                                    float(klo[0, 0]), float(khi[0, 0]), given)
            return out[None, None, :] if path else None
        chunk = _Chunk(y, a, b, v, klo, khi, bets)
        rows = np.arange(B)
        while rows.size:  # each pass feeds every row up to its next grid rebuild
            rows = self._advance(chunk, rows)
        self.t += T
        self._hist.append(np.concatenate([np.stack([y, a, b]), chunk.lam]))
        return chunk.bounds if path else None

    def _advance_one(self, y, a, b, v, klo, khi, given=None) -> np.ndarray:
        """:meth:`_advance` for one sequence and one observation, with the same arithmetic (checked bit for bit by the
        tests) and a fraction of its overhead."""
        info = np.cumsum(np.array([self._info[0], 1.0 / v]))[1]
        s = np.float64(self._count[0] + 1)
        if given is None:
            lam = lam_m = np.sqrt(2.0 * math.log(1.0 / self.bet_level) / (info * np.log1p(s))) / v
        else:
            lam, lam_m = given
        g = self._grid[0]
        inc_p, inc_m = _capital_increments(g, y, a, b, lam, lam_m, self.cap)
        cum_p = self._logp[0] + inc_p
        cum_m = self._logm[0] + inc_m
        G = g.size
        thr = self._thr[:, None]
        lo_i = _lower_index(cum_p >= thr).tolist()  # both levels at once
        hi_i = _upper_index(cum_m >= thr).tolist()
        out = np.empty(4)
        for j in range(2):
            lo_t = max(g[lo_i[j]] if lo_i[j] >= 0 else -np.inf, klo)
            hi_t = min(g[hi_i[j]] if hi_i[j] < G else np.inf, khi)
            out[2 * j] = max(lo_t, self._lower[0, j])
            out[2 * j + 1] = min(hi_t, self._upper[0, j])
        self._logp[0], self._logm[0] = cum_p, cum_m
        self._info[0] = info
        self._count[0] += 1
        self._lower[0] = out[0::2]
        self._upper[0] = out[1::2]
        self.t += 1
        self._hist.append(np.array([y, a, b, lam, lam_m]).reshape(5, 1, 1))
        if self._needs_regrid(out[2:3, None], out[3:4, None], self._grid)[0, 0]:
            self._regrid(np.array([0]))
        return out

    def _advance(self, c: _Chunk, rows: np.ndarray) -> np.ndarray:
        """Feed ``rows`` from their chunk positions up to (and including) the first observation after which their grid
        needs rebuilding; rebuild those grids. Returns the rows with observations left."""
        T = c.y.shape[1]
        start = c.pos[rows]
        s0 = int(start.min())
        L = T - s0
        idx = start[:, None] + np.arange(L)[None, :]
        given = () if c.given is None else (c.given[0], c.given[1])
        if np.all(start == s0):  # the usual case: every row at the same place
            live = np.ones((rows.size, L), dtype=bool)
            every = rows.size == c.y.shape[0]
            y, a, b, v, klo, khi, *sizes = (x[:, s0:] if every else x[rows, s0:]
                                            for x in (c.y, c.a, c.b, c.v, c.klo, c.khi, *given))
        else:
            live = idx < T
            idx = np.minimum(idx, T - 1)
            y, a, b, v, klo, khi, *sizes = (np.take_along_axis(x[rows], idx, axis=1)
                                            for x in (c.y, c.a, c.b, c.v, c.klo, c.khi, *given))
        # running sums start from the stored totals so that they round as one-by-one updates do
        inv = np.where(live, 1.0 / v, 0.0)
        info = np.cumsum(np.concatenate([self._info[rows, None], inv], axis=1), axis=1)[:, 1:]
        s = (self._count[rows, None] + np.cumsum(live, axis=1)).astype(np.float64)
        if sizes:
            lam, lam_m = (np.where(live, x, 0.0) for x in sizes)
        else:
            lam = lam_m = np.where(live, np.sqrt(2.0 * math.log(1.0 / self.bet_level) / (info * np.log1p(s))) / v, 0.0)
        grid = self._grid[rows][:, None, :]
        inc_p, inc_m = _capital_increments(grid, y[:, :, None], a[:, :, None], b[:, :, None], lam[:, :, None],
                                           lam_m[:, :, None], self.cap)
        cum_p = _running_sums(self._logp[rows], inc_p)
        cum_m = _running_sums(self._logm[rows], inc_m)
        g = self._grid[rows]
        bounds = np.empty(y.shape + (4,))
        for j, thr in enumerate(self._thr):
            lo_i = _lower_index(cum_p >= thr)  # (r, L)
            hi_i = _upper_index(cum_m >= thr)
            lo_t = np.where(lo_i >= 0, np.take_along_axis(g, np.maximum(lo_i, 0), axis=1), -np.inf)
            hi_t = np.where(hi_i < g.shape[1], np.take_along_axis(g, np.minimum(hi_i, g.shape[1] - 1), axis=1),
                            np.inf)
            lo_t = np.maximum(lo_t, klo)
            hi_t = np.minimum(hi_t, khi)
            bounds[:, :, 2 * j] = np.maximum.accumulate(np.maximum(lo_t, self._lower[rows, j:j + 1]), axis=1)
            bounds[:, :, 2 * j + 1] = np.minimum.accumulate(np.minimum(hi_t, self._upper[rows, j:j + 1]), axis=1)
        need = self._needs_regrid(bounds[:, :, 2], bounds[:, :, 3], g) & live
        has = need.any(axis=1)
        stop = np.where(has, np.argmax(need, axis=1), live.sum(axis=1) - 1)  # last position fed
        r_ = np.arange(rows.size)
        self._logp[rows] = cum_p[r_, stop]
        self._logm[rows] = cum_m[r_, stop]
        self._info[rows] = info[r_, stop]
        self._count[rows] += stop + 1
        self._lower[rows] = bounds[r_, stop][:, 0::2]
        self._upper[rows] = bounds[r_, stop][:, 1::2]
        fed = np.arange(L)[None, :] <= stop[:, None]
        rr, tt = np.nonzero(fed)
        c.lam[0, rows[rr], idx[rr, tt]] = lam[rr, tt]
        c.lam[1, rows[rr], idx[rr, tt]] = lam_m[rr, tt]
        c.bounds[rows[rr], idx[rr, tt]] = bounds[rr, tt]
        c.pos[rows] = start + stop + 1
        if has.any():
            self._regrid(rows[has], c)
        return rows[c.pos[rows] < T]

    # -- grid ------------------------------------------------------------------------------
    def _needs_regrid(self, lo, hi, grid) -> np.ndarray:
        """True where the two-sided interval has shrunk below ``_REGRID_FRACTION`` of the grid's span (and is not a
        point)."""
        span = (grid[:, -1] - grid[:, 0])[:, None]
        # once the grid's spacing is below _MIN_SPACING of the range, bounds are that precise already
        fine = span <= _MIN_SPACING * (self.grid_size - 1) * (self.bounds[1] - self.bounds[0])
        return (hi - lo < _REGRID_FRACTION * span) & ~fine

    def _regrid(self, rows: np.ndarray, chunk: _Chunk | None = None) -> None:
        """New grids inside the current intervals of ``rows``, with capital recomputed from the history (the stored one,
        then the part of ``chunk`` each row has been fed)."""
        G = self.grid_size
        stored = self.history()
        upto = np.zeros(rows.size, dtype=np.int64) if chunk is None else chunk.pos[rows]
        for u in np.unique(upto):
            sel = rows[upto == u]
            hist = stored[:, sel]
            if u > 0:
                part = np.stack([chunk.y[sel, :u], chunk.a[sel, :u], chunk.b[sel, :u], chunk.lam[0, sel, :u],
                                 chunk.lam[1, sel, :u]])
                hist = np.concatenate([hist, part], axis=2)
            lo, hi = self._lower[sel, 1], self._upper[sel, 1]
            grid = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, G)[None, :]
            logp = np.zeros((sel.size, G))
            logm = np.zeros((sel.size, G))
            T = hist.shape[2]
            block = max(1, _CHUNK // (_REGRID_STEP * G))
            for r0 in range(0, sel.size, block):  # rows are independent; time runs in fixed steps
                r1 = min(sel.size, r0 + block)
                for s in range(0, T, _REGRID_STEP):
                    y, a, b, lam, lam_m = (h[r0:r1, s:s + _REGRID_STEP, None] for h in hist)
                    inc_p, inc_m = _capital_increments(grid[r0:r1, None, :], y, a, b, lam, lam_m, self.cap)
                    logp[r0:r1] += inc_p.sum(axis=1)
                    logm[r0:r1] += inc_m.sum(axis=1)
            self._grid[sel], self._logp[sel], self._logm[sel] = grid, logp, logm
        self.regrids += rows.size

    # -- batching and snapshots ----------------------------------------------------------------
    def take(self, rows) -> BettingCS:
        """The sequences ``rows`` as a confidence sequence of their own, in that order: fed the same observations, each
        row goes on exactly as it would here (rows never interact)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size == 0 or rows.min() < 0 or rows.max() >= self.n_seq:
            raise ValueError(f"rows must be a non-empty selection of the {self.n_seq} sequences")
        part = BettingCS(rows.size, delta=self.delta, bounds=self.bounds, bet_level=self.bet_level, cap=self.cap,
                         grid_size=self.grid_size)
        part.t = self.t
        for name in ("_count", "_info", "_grid", "_logp", "_logm", "_lower", "_upper"):
            setattr(part, name, getattr(self, name)[rows].copy())
        h = self.history()
        part._hist = [h[:, rows].copy()] if h.shape[2] else []
        return part

    def state_dict(self) -> dict:
        return {
            "format": _FORMAT, "n_seq": self.n_seq, "delta": self.delta, "bounds": list(self.bounds),
            "bet_level": self.bet_level, "cap": self.cap, "grid_size": self.grid_size, "t": self.t,
            "count": self._count.copy(), "info": self._info.copy(), "grid": self._grid.copy(), "logp": self._logp.copy(),
            "logm": self._logm.copy(), "lower": self._lower.copy(), "upper": self._upper.copy(),
            "history": self.history().copy(), "regrids": self.regrids,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> BettingCS:
        if state.get("format") != _FORMAT:
            raise ValueError(f"unsupported BettingCS state format {state.get('format')!r}")
        cs = cls(int(state["n_seq"]), delta=state["delta"], bounds=tuple(state["bounds"]),
                 bet_level=state["bet_level"], cap=state["cap"], grid_size=int(state["grid_size"]))
        cs.t = int(state["t"])
        cs._count = np.array(state["count"], dtype=np.int64).reshape(cs.n_seq)
        for name in ("info", "grid", "logp", "logm", "lower", "upper"):
            setattr(cs, "_" + name, np.array(state[name], dtype=np.float64))
        h = np.array(state["history"], dtype=np.float64)
        if h.shape[0] == 4:  # written when both gamblers always bet the same size: y, a, b, lam
            h = np.concatenate([h, h[3:4]])
        h = h.reshape(5, cs.n_seq, -1)
        cs._hist = [h] if h.shape[2] else []
        cs.regrids = int(state["regrids"])
        return cs
