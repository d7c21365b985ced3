"""The decision core of a selection: pure functions from a frozen view of the evidence to decisions.

Every front end that tests candidates under a multiple-testing procedure, or ranks models by their pairs
(:class:`Pairs`, :func:`open_pairs`, :func:`new_ties`, :func:`ranking_outcome`), decides with these functions and
nothing else, through the sessions that apply them (:class:`~.session.SelectionSession`,
:class:`~.ranking_session.RankingSession`), which the engine's rounds and ``certsel.inspect`` both feed: a session
builds an :class:`Evidence` per candidate from its records, asks :func:`settle` after every round or score and the
final functions (:func:`final_certified`, :func:`reconcile`, :func:`bound_levels`, :func:`joint_bounds`) when done,
and applies the decisions to its records. A rule changed here changes every front end alike.

Why deciding early keeps every guarantee is in :mod:`.selection`'s docstring: a certification is the running maximum of
an e-process crossing its level, contained in the event "it ever crosses", which Ville's inequality bounds whatever
schedule decided when to look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from certsel.policies.comparison import (
    better_matrix,
    copeland,
    implied_orders,
    pairs_needed,
    possible_winners,
    rank_groups,
    rank_intervals,
    tied_pairs,
    topk_status,
)
from certsel.policies.procedures import CandidateView, Procedure

from certsel.orchestrator.results.ranking import Ranking, TopK
from certsel.orchestrator.results.outcomes import BUDGET_STOP_WORDS, FUTILE_WORDS
from certsel.policies.budget_stop import Growth
from certsel.policies.budget_stop import stops as budget_stops
from certsel.orchestrator.results.records import Status


@dataclass(frozen=True)
class Evidence:
    """One candidate's evidence as the rules see it (a copy: deciding changes no record)."""

    name: str
    status: Status
    labels: int = 0  # human labels its test has taken
    max_log_e: float = 0.0  # running maximum of its log e-value (testing policies); +/-inf: known exactly
    exhausted: bool = False  # its budget is spent: no more labels will come
    max_log_futility: float = 0.0  # the futility test's evidence for R >= alpha (log, running max)
    decision: int = 0  # an estimation policy's own: -1 R < alpha certified, +1 R > alpha certified
    log_e: float = 0.0  # its log e-value now (testing policies)
    growth: Growth | None = None  # how its log e-value grew lately (the budget stop's estimate)
    remaining: int | None = None  # human labels its budget has left (None: no budget known)
    futility_log_e: float = 0.0  # the futility test's log e-value now
    futility_growth: Growth | None = None  # how it grew lately (None: no futility path known)

    def decidable(self, rules: Rules, log_threshold: float) -> bool:
        """Whether the rest of its budget could still decide it, as the budget stop judges (policies/budget_stop.py):
        its test could still reach ``log_threshold``, or, in a gate with a futility stop, the futility test its level
        (:attr:`Rules.decides_futility`). A side whose growth is unknown counts as able to."""
        level = rules.budget_stop
        if self.growth is None or not budget_stops(self.growth, self.log_e, log_threshold, self.remaining, level):
            return True
        return rules.decides_futility and (self.futility_growth is None or not budget_stops(
            self.futility_growth, self.futility_log_e, rules.futility_log_level, self.remaining, level))


@dataclass(frozen=True)
class Rules:
    """What a selection decides by: its procedure at ``delta``, e-values (``testing``) or an estimation policy's own
    decisions, and the early stops it allows. ``adaptive``: settle candidates as soon as the evidence allows (False: the
    full-budget baseline: certified only at budget's end, nothing stops early); ``futility``: delta_f of the futility
    stop; ``prune_keys``: the objective as "smaller is better", to stop candidates that cannot improve the selection
    (None: off)."""

    procedure: Procedure
    delta: float
    testing: bool = True
    adaptive: bool = True
    futility: float | None = None
    prune_keys: tuple[float, ...] | None = None
    budget_stop: float | None = None  # gamma of the budget stop (policies/budget_stop.py); None: off

    @property
    def futility_log_level(self) -> float | None:
        return None if self.futility is None or not self.testing else math.log(1.0 / self.futility)

    @property
    def decides_futility(self) -> bool:
        """Whether a futility stop is an outcome of its own, worth the budget stop's patience: in a gate a futile
        candidate fails, a decision; in a selection it ends uncertified, as a budget-stopped one does, so there the
        budget stop judges the claim's own test alone (policies/budget_stop.RULE_VERSION 3)."""
        return self.futility_log_level is not None and self.procedure.gates


class Certify(NamedTuple):
    """Certify candidate ``index``: its evidence passed ``log_level`` (None for an estimation policy's own decision);
    ``reason`` empty for a crossing seen while it ran."""

    index: int
    log_level: float | None
    reason: str = ""


class End(NamedTuple):
    """End candidate ``index`` with ``status``, for ``reason``."""

    index: int
    status: Status
    reason: str


Decision = Certify | End


def log_thresholds(rules: Rules, certified: np.ndarray) -> np.ndarray:
    """The log e-value each candidate needs now, given the candidates certified so far."""
    return rules.procedure.log_thresholds(rules.delta, certified)


def views(statuses: Sequence[Status], names: Sequence[str]) -> tuple[CandidateView, ...]:
    """The procedure hooks' views of candidates with these statuses."""
    return tuple(CandidateView(n, s.finished, s.test_failed) for n, s in zip(names, statuses, strict=True))


def settle(evidence: Sequence[Evidence], rules: Rules) -> list[Decision]:
    """The decisions after new evidence, in the order they apply. Certifications come first, until none changes a
    threshold (Holm: each one loosens the others'); only then do candidates end that can no longer be certified (R >=
    alpha certified, the futility test, the budget spent), at the thresholds reached; then those the selection no longer
    needs (pruning by objective, the procedure's own stops, e.g. a fixed sequence after a failure)."""
    status = [e.status for e in evidence]
    out: list[Decision] = []

    def end(k: int, new: Status, reason: str) -> None:
        status[k] = new
        out.append(End(k, new, reason))

    changed = True
    while changed:
        thresholds = log_thresholds(rules, np.array([s is Status.CERTIFIED for s in status], dtype=bool))
        changed = False
        for k, e in enumerate(evidence):
            hit = _certifies(e, status[k], float(thresholds[k]), rules)
            if hit is not None:
                status[k] = Status.CERTIFIED
                out.append(hit._replace(index=k))
                changed = True
    for k, e in enumerate(evidence):
        if status[k].finished or status[k] is Status.PENDING:
            continue
        if not rules.testing and e.decision == 1:
            end(k, Status.ABOVE_ALPHA, "risk above alpha certified")
        elif (rules.futility_log_level is not None and rules.adaptive
              and e.max_log_futility >= rules.futility_log_level):
            end(k, Status.FUTILE, f"{FUTILE_WORDS} at the futility level after {e.labels} human labels")
        elif (rules.budget_stop is not None and rules.adaptive and rules.testing and e.remaining is not None
              and not e.exhausted and not e.decidable(rules, float(thresholds[k]))):
            end(k, Status.NOT_CERTIFIED, f"{BUDGET_STOP_WORDS} after {e.labels} human labels: its remaining "
                                         f"{e.remaining} would {'decide' if rules.decides_futility else 'certify'} "
                                         f"it with probability < {rules.budget_stop / 2:g}")
        elif e.exhausted:
            end(k, Status.NOT_CERTIFIED, "budget spent")
    if not rules.adaptive:
        return out
    if rules.prune_keys is not None:
        best = min((rules.prune_keys[k] for k, s in enumerate(status) if s is Status.CERTIFIED), default=math.inf)
        for k, s in enumerate(status):
            if not s.finished and rules.prune_keys[k] >= best:
                end(k, Status.STOPPED if s.running else Status.SKIPPED, "cannot improve the selection")
    index = {e.name: k for k, e in enumerate(evidence)}
    for stop in rules.procedure.after_settle(views(status, [e.name for e in evidence])):
        k = index[stop.name]
        end(k, Status.STOPPED if status[k].running else Status.SKIPPED, stop.reason)
    return out


def _certifies(e: Evidence, status: Status, log_level: float, rules: Rules) -> Certify | None:
    if status.finished or status is Status.PENDING:
        return None
    if not rules.adaptive and rules.testing and not e.exhausted:
        return None  # the baseline: every candidate spends its whole budget
    if rules.testing and e.max_log_e >= log_level:
        return Certify(0, log_level)
    if not rules.testing and e.decision == -1:
        return Certify(0, None)
    return None


def final_certified(evidence: Sequence[Evidence], rules: Rules) -> np.ndarray:
    """The procedure applied to the final evidence (for e-values: the running maxima)."""
    if rules.testing:
        return rules.procedure.certified(np.array([e.max_log_e for e in evidence]), rules.delta)
    return rules.procedure.certified_by_decisions(np.array([e.status is Status.CERTIFIED for e in evidence]))


def reconcile(evidence: Sequence[Evidence], rules: Rules, certified: np.ndarray) -> list[Decision]:
    """Statuses that agree with the final set: a candidate that ended at a stricter level than the procedure finally
    reached (Holm: out of budget before others were certified) is certified at that level; one that passed its own test
    but is not in the set (a fixed sequence after a failure) says so."""
    levels = decision_levels(evidence, rules)
    out: list[Decision] = []
    for k, (e, ok) in enumerate(zip(evidence, certified, strict=True)):
        if ok and e.status is not Status.CERTIFIED:
            log_level = float(-np.log(levels[k])) if rules.testing else None
            out.append(Certify(k, log_level, "in the final set at the level the procedure reached"))
        elif e.status is Status.CERTIFIED and not ok:
            out.append(End(k, Status.STOPPED, "passed its own test but is not in the procedure's certified set"))
    return out


def decision_levels(evidence: Sequence[Evidence], rules: Rules) -> np.ndarray:
    """Each candidate's decision level (its e-value's threshold is 1 / level): the procedure's levels at the final
    e-values for a testing policy, the per-candidate levels otherwise."""
    proc = rules.procedure
    if rules.testing:
        return proc.decision_deltas(rules.delta, np.array([e.max_log_e for e in evidence]))
    return proc.candidate_deltas(rules.delta, len(evidence))


def bound_levels(rules: Rules, certified: np.ndarray) -> np.ndarray:
    """The level at which each candidate's own bound enters the simultaneous bounds (NaN: none)."""
    return rules.procedure.joint_levels(rules.delta, certified)


def joint_bounds(rules: Rules, alpha: float, certified: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Bounds on every candidate's risk that hold together with probability >= 1 - delta, from each one's own bound at
    its :func:`bound_levels` level (NaN: no statement); <= alpha exactly for the certified set."""
    return rules.procedure.simultaneous_bounds(rules.delta, alpha, certified, own)


# -- rankings -------------------------------------------------------------------------------------
# A ranking's pairs (ii[p], jj[p]) are read as arrays: each pair's own decision (-1: the first
# model's risk is lower, +1: higher, 0: open), its bounds on u = (loss_i - loss_j + 1) / 2, the
# items it used, whether it is done and whether a tie within epsilon was certified; ``dead``
# holds the models whose label source failed for good (their pairs end undecided).


@dataclass(frozen=True)
class Pairs:
    """A ranking's pair evidence, frozen (see the comment above)."""

    names: tuple[str, ...]
    ii: np.ndarray
    jj: np.ndarray
    decision: np.ndarray
    bounds: np.ndarray  # (P, 4): one-sided lower and upper on u, then the two-sided interval
    n_labeled: np.ndarray
    done: np.ndarray
    tied: np.ndarray
    dead: frozenset = frozenset()

    @property
    def alive(self) -> np.ndarray:
        return np.array([m not in self.dead for m in range(len(self.names))])


@dataclass(frozen=True)
class RankingRules:
    """What a ranking decides by: its goal (``ranking``, ``best``, ``topk`` with ``topk``, ``all``), the tie tolerance
    ``epsilon`` (None: no ties) and the most items a pair may use."""

    goal: str
    topk: int | None = None
    epsilon: float | None = None
    cap: int | None = None


def direct_orders(pairs: Pairs) -> np.ndarray:
    """The orders the pairs certified themselves (``better[a, b]``: a's risk certified lower)."""
    return better_matrix(len(pairs.names), pairs.ii, pairs.jj, pairs.decision == -1, pairs.decision == 1)


def needed_pairs(pairs: Pairs, rules: RankingRules) -> np.ndarray:
    """The pairs the ranking's goal still needs, given the certified orders and ties."""
    return pairs_needed(rules.goal, implied_orders(direct_orders(pairs)), pairs.ii, pairs.jj, pairs.alive,
                        tied=pairs.tied, k=rules.topk)


def open_pairs(pairs: Pairs, rules: RankingRules) -> np.ndarray:
    """The pairs that take more items: needed, not done, under the cap, both models alive."""
    alive = pairs.alive
    cap = np.inf if rules.cap is None else rules.cap
    return (needed_pairs(pairs, rules) & ~pairs.done & (pairs.n_labeled < cap) & alive[pairs.ii]
            & alive[pairs.jj])


def new_ties(pairs: Pairs, rules: RankingRules, which) -> np.ndarray:
    """Among the pairs ``which``, those whose bounds now certify |R_i - R_j| < epsilon (a tie stands once certified: the
    bounds hold at every step on the pair's event)."""
    which = np.fromiter(which, dtype=np.int64)
    if rules.epsilon is None:
        return which[:0]
    which = which[~pairs.tied[which] & (pairs.n_labeled[which] > 0)]
    b = pairs.bounds[which]
    return which[tied_pairs(b[:, 0], b[:, 1], rules.epsilon)]


def ranking_level(procedure: Procedure, delta: float, K: int, per_direction: float) -> str:
    """A ranking's level in words: the procedure's, and each direction of a pair's sign."""
    return procedure.level(delta, K) + f" ({per_direction:.4g} per direction)"


@dataclass(frozen=True)
class RankingOutcome:
    """What a ranking certified, and each model's end: (status, reason), None for a dead model."""

    ranking: Ranking
    top: list[str]  # the models certified best (goal topk: certified among the k best)
    selected: str | None
    ends: list[tuple[Status, str] | None]


def ranking_outcome(pairs: Pairs, rules: RankingRules, pair_delta: float, pair_delta_per_direction: float
                    ) -> RankingOutcome:
    """The certified partial order, ties, rank intervals and top-k set of the pairs' final evidence, and each model's
    status: certified when it is certified best (or among the k best), stopped otherwise."""
    names, ii, jj, dead = list(pairs.names), pairs.ii, pairs.jj, pairs.dead
    K, P = len(names), ii.size
    direct = direct_orders(pairs)
    better = implied_orders(direct)  # certified directly or through certified pairs
    tied = pairs.tied & ~(better[ii, jj] | better[jj, ii])  # an implied order says more than a tie
    n_used = np.zeros((K, K), dtype=np.int64)
    n_used[ii, jj] = n_used[jj, ii] = pairs.n_labeled
    # the interval of the pair's own decisions: its one-sided bounds, each at the level a sign is
    # certified at, so the interval excludes 0 exactly when an order is certified; together they
    # hold at the pair's level delta/P (simultaneously over pairs at delta)
    b = pairs.bounds
    intervals = {f"{names[ii[p]]} - {names[jj[p]]}": [2 * float(b[p, 0]) - 1, 2 * float(b[p, 1]) - 1]
                 for p in range(P)}  # on R(first) - R(second)
    score, order = copeland(better)
    best_rank, worst_rank = rank_intervals(better)
    ties_of = {names[m]: [] for m in range(K)}
    for p in np.flatnonzero(tied):
        ties_of[names[ii[p]]].append(names[jj[p]])
        ties_of[names[jj[p]]].append(names[ii[p]])
    topk = None
    if rules.goal == "topk":
        in_, out = topk_status(better, rules.topk)
        topk = TopK(k=rules.topk, certified_in=[names[m] for m in np.flatnonzero(in_)],
                    certified_out=[names[m] for m in np.flatnonzero(out)],
                    undetermined=[names[m] for m in np.flatnonzero(~in_ & ~out)])
    ends: list[tuple[Status, str] | None] = []
    for m in range(K):
        if m in dead:
            ends.append(None)
            continue
        won = better[m].sum() == K - 1 if topk is None else names[m] in topk.certified_in
        ends.append((Status.CERTIFIED if won else Status.STOPPED,
                     f"{int(better[m].sum())} certified wins, {int(better[:, m].sum())} certified losses"
                     + (f", {len(ties_of[names[m]])} certified ties" if ties_of[names[m]] else "")))
    top = ([names[m] for m in range(K) if better[m].sum() == K - 1 and m not in dead] if topk is None
           else [n for n in topk.certified_in if names.index(n) not in dead])
    ranking = Ranking(
        # what is certified: a partial order, the pairs whose sign was certified and the orders
        # they imply (valid together on the same simultaneous event)
        better={names[a]: [names[c] for c in np.flatnonzero(better[a])] for a in range(K)},
        better_direct={names[a]: [names[c] for c in np.flatnonzero(direct[a])] for a in range(K)},
        possible_winners=[names[m] for m in np.flatnonzero(possible_winners(better)) if m not in dead],
        goal=rules.goal,
        # a way to list the models, not a certified rank: certified wins minus certified losses
        order=[names[m] for m in order],
        score={names[m]: int(score[m]) for m in range(K)},
        score_meaning="Copeland score (certified wins minus certified losses); orders the list, is not certified",
        pairs_certified=int(better.sum()),
        pairs_certified_directly=int(direct.sum()),
        pairs=P,
        pair_delta=pair_delta,
        pair_delta_per_direction=pair_delta_per_direction,
        items_per_pair={f"{names[ii[p]]} vs {names[jj[p]]}": int(n_used[ii[p], jj[p]]) for p in range(P)},
        difference_intervals=intervals,
        epsilon=rules.epsilon,
        tied=[f"{names[ii[p]]} ~ {names[jj[p]]}" for p in np.flatnonzero(tied)],
        pairs_tied=int(tied.sum()),
        rank_intervals={names[m]: [int(best_rank[m]), int(worst_rank[m])] for m in range(K)},
        rank_groups=[[names[m] for m in g] for g in rank_groups(better)],
        topk=topk,
    )
    selected = top[0] if top and topk is None else None  # a top-k set has no one selected model
    return RankingOutcome(ranking, top, selected, ends)
