"""Many runs of Seq on one shared random order, vectorised: the pair policies of a ranking.

A pairwise ranking of K models runs P = K(K-1)/2 Seq sign tests (``radius="betting"``), all with the job's seed, so they
draw the same items in the same order for as long as they run. :class:`SeqBank` holds the P runs as rows: row b fed the
first n_b items of the order is, number for number, :class:`~certsel.policies.cer_eval.Seq` (same seed, delta, threshold
and strictness) fed the same items -- the same designs (:func:`~certsel.policies.stratified.one_group_design`),
observations (:func:`~certsel.policies.stratified.draw_observations`) and betting confidence sequence
(:class:`~certsel.policies.confseq.BettingCS`, whose rows are independent). Rows fed together share one sequence object
("cohort"), so a ranking round is one vectorised update; a cohort whose rows part ways is split with
:meth:`BettingCS.take`.

The guarantee is each run's own (Seq's, :mod:`certsel.policies.stratified`): sharing the order couples the runs' errors,
which the ranking's Bonferroni split over pairs allows. With ``bet`` (:class:`~certsel.policies.pair_bets.MarginBet`)
the runs bet for the claims they stop on instead of Seq's plug-in: other, equally valid capital processes, so the rows
are no longer Seq's number for number.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_level, check_positive_int
from .pair_bets import MarginBet
from .confseq import BET_CAP, BettingCS
from .strata import DEFAULT_FLOOR, draw_observations, group_queues, one_group_design, shrunk_moments

_FORMAT = 1


class SeqBank:
    """``n_runs`` Seq runs (threshold decisions at ``threshold``) over ``n_items`` items.

    ``feed(rows, x)`` gives ``rows`` the values ``x`` (R, T) of their next T items (:meth:`next_items`); rows fed
    together must have been fed equally far. Readouts are per row: :attr:`n_labeled`, :meth:`bounds`, :attr:`decision`
    (-1: R below the threshold certified, +1: above, 0: neither) and :attr:`done`.
    """

    def __init__(self, n_items: int, n_runs: int, *, delta: float, threshold: float, seed=None,
                 strict: bool = False, bet: MarginBet | None = None):
        self.n_items = check_positive_int(n_items, "n_items")
        self.n_runs = check_positive_int(n_runs, "n_runs")
        self.delta = check_level(delta, "delta")
        self.threshold = float(threshold)
        self.strict = bool(strict)
        self.bet = bet
        N, B = self.n_items, self.n_runs
        # Seq's order: one group, its queue shuffled once by the policy's generator
        self.order = group_queues(np.zeros(N, dtype=np.int64), 1, np.zeros(N, dtype=np.int8),
                                  np.random.default_rng(seed))[0]
        self._n = np.zeros(B, dtype=np.int64)
        self._moments = np.zeros((3, B))  # count, sum and sum of squares of the labels, per row
        self._sum = np.zeros(B)  # the labels' running sum in draw order (the observations' S_t)
        self._bounds = np.tile(np.array([0.0, 1.0, 0.0, 1.0]), (B, 1))
        # tuned for what stops a run: a one-sided bound against the threshold (as Seq does)
        cap = BET_CAP if bet is None else bet.cap
        self._cohorts: list[tuple[np.ndarray, BettingCS]] = [(np.arange(B), BettingCS(B, delta=self.delta,
                                                                                      bet_level=self.delta, cap=cap))]

    # -- reading -------------------------------------------------------------------------
    @property
    def n_labeled(self) -> np.ndarray:
        return self._n.copy()

    def bounds(self) -> np.ndarray:
        """(n_runs, 4): one-sided lower and upper bounds at level delta, then the two-sided interval."""
        return self._bounds.copy()

    @property
    def decision(self) -> np.ndarray:
        """Seq's threshold decision per row (see :attr:`~certsel.policies.estimation.EstimationPolicy.decision`)."""
        lo, hi = self._bounds[:, 0], self._bounds[:, 1]
        below = hi < self.threshold if self.strict else hi <= self.threshold
        return np.where(below, -1, np.where(lo > self.threshold, 1, 0))

    @property
    def done(self) -> np.ndarray:
        return (self._n == self.n_items) | (self.decision != 0)

    def next_items(self, row: int, batch: int) -> np.ndarray:
        """The next ``batch`` items of ``row`` (fewer at the end of the test set; none once done)."""
        if self.done[row]:
            return np.zeros(0, dtype=np.int64)
        n = int(self._n[row])
        return self.order[n:n + check_positive_int(batch, "batch")].copy()

    # -- feeding -------------------------------------------------------------------------
    def feed(self, rows, x) -> None:
        """Rows ``rows`` (all fed equally far so far, none done) observe the values ``x`` (len(rows), T) in [0, 1] of
        their next T items."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        x = np.asarray(x, dtype=np.float64)
        if rows.size == 0:
            return
        if np.unique(rows).size != rows.size or rows.min() < 0 or rows.max() >= self.n_runs:
            raise ValueError("rows must be distinct run indices")
        if x.ndim != 2 or x.shape[0] != rows.size:
            raise ValueError(f"x must have shape ({rows.size}, T), got {x.shape}")
        if not np.all(np.isfinite(x)) or np.any(x < 0.0) or np.any(x > 1.0):
            raise ValueError("values must lie in [0, 1]")
        n = self._n[rows]
        if np.any(n != n[0]):
            raise ValueError("rows fed together must have been fed equally far")
        if np.any(self.done[rows]):
            raise ValueError("a run that is done takes no more values")
        n0, T = int(n[0]), x.shape[1]
        if n0 + T > self.n_items:
            raise ValueError(f"{T} values but only {self.n_items - n0} items are left")
        # what Seq fixes before the batch: its one group's shrunk moments and draw probability
        mean, var = shrunk_moments(self._moments[:, rows])
        share = 1.0  # one group: pool / pool.sum() and the Neyman weight are both exactly 1
        pi = DEFAULT_FLOOR * share + (1.0 - DEFAULT_FLOOR) * share
        sizes = float(self.n_items - n0) - np.arange(T, dtype=np.float64)
        design = one_group_design(sizes[None, :], mean[:, None], var[:, None], self.n_items, pi)
        y, lo, hi, v, klo, khi, _, total = draw_observations(x, design, self._sum[rows], n0, self.n_items)
        bets = None
        if self.bet is not None:  # sized from the labels before this batch (predictable)
            bets = np.stack(self.bet.sizes(mean, np.sqrt(var / (self._moments[0, rows] + 1.0)), v))
        at_of = np.empty(self.n_runs, dtype=np.int64)
        at_of[rows] = np.arange(rows.size)
        for sub, cs in self._split(rows):
            at = at_of[sub]
            cs.feed(y[at], lo[at], hi[at], v[at], klo[at], khi[at], bets=None if bets is None else bets[:, at])
            lo2, hi2 = cs.interval
            self._bounds[sub] = np.column_stack([cs.lower, cs.upper, lo2, hi2])
        self._sum[rows] = total
        # the moments as Seq's engine adds a batch: the batch's sums from 0 in draw order
        self._moments[:, rows] += np.stack([np.full(rows.size, float(T)), np.cumsum(x, axis=1)[:, -1],
                                            np.cumsum(x * x, axis=1)[:, -1]])
        self._n[rows] += T

    def _split(self, rows: np.ndarray) -> list[tuple[np.ndarray, BettingCS]]:
        """The cohorts holding ``rows``, each cut down to exactly those rows (the rest of a cut cohort stays a cohort of
        its own)."""
        wanted = np.zeros(self.n_runs, dtype=bool)
        wanted[rows] = True
        out, kept = [], []
        for members, cs in self._cohorts:
            inside = wanted[members]
            if inside.all():
                out.append((members, cs))
                kept.append((members, cs))
            elif inside.any():
                i_in, i_out = np.flatnonzero(inside), np.flatnonzero(~inside)
                part = (members[i_in], cs.take(i_in))
                out.append(part)
                kept.extend([part, (members[i_out], cs.take(i_out))])
            else:
                kept.append((members, cs))
        self._cohorts = kept
        return out

    # -- snapshots -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"format": _FORMAT, "n_items": self.n_items, "n_runs": self.n_runs, "delta": self.delta,
                "threshold": self.threshold, "strict": self.strict, "order": self.order.copy(), "n": self._n.copy(),
                "moments": self._moments.copy(), "sum": self._sum.copy(), "bounds": self._bounds.copy(),
                "cohorts": [{"rows": m.copy(), "cs": cs.state_dict()} for m, cs in self._cohorts],
                **({} if self.bet is None else {"bet": {"claims": [list(c) for c in self.bet.claims],
                                                        "cap": self.bet.cap}})}

    @classmethod
    def from_state_dict(cls, state: dict) -> SeqBank:
        if state.get("format") != _FORMAT:
            raise ValueError(f"unsupported SeqBank state format {state.get('format')!r}")
        bet = state.get("bet")
        bank = cls(int(state["n_items"]), int(state["n_runs"]), delta=state["delta"], threshold=state["threshold"],
                   strict=state["strict"],
                   bet=None if bet is None else MarginBet(tuple((float(lo), float(hi)) for lo, hi in bet["claims"]),
                                                          float(bet["cap"])))
        bank.order = np.asarray(state["order"], dtype=np.int64).copy()
        bank._n = np.asarray(state["n"], dtype=np.int64).copy()
        bank._moments = np.array(state["moments"], dtype=np.float64).reshape(3, bank.n_runs)
        bank._sum = np.array(state["sum"], dtype=np.float64)
        bank._bounds = np.array(state["bounds"], dtype=np.float64).reshape(bank.n_runs, 4)
        bank._cohorts = [(np.asarray(c["rows"], dtype=np.int64).copy(), BettingCS.from_state_dict(c["cs"]))
                         for c in state["cohorts"]]
        return bank

