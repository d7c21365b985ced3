"""A pairwise ranking's logic over its pairs (section 6.4 of "Cer-Eval: Certifiable and
Cost-Efficient Evaluation Framework for LLMs"): certified orders and their transitive closure,
ties within epsilon, rank intervals and groups, top-k membership and the pairs each goal
still needs.

Two models A and B are compared on the same items through u = (loss_A - loss_B + 1) / 2 in
[0, 1]; E[u] < 1/2 means A has the lower risk. Each pair's test (any policy kind, run by the
engine: ``orchestrator/engine/pairwise.py``) decides a sign with one-sided bounds, at most
delta/2 of the pair's level per direction, so a false sign, including any sign at an exact tie
E[d] = 0, is certified with probability at most the pair's level; the procedure splits delta
over the pairs.
"""

from __future__ import annotations

import numpy as np


def sign_policy_delta(delta: float, radius: str) -> float:
    """The level to give a pair's policy so that its sign decisions are false with probability
    <= ``delta``, an exact tie included: the betting policies decide with one-sided bounds at
    their own level, so each direction gets delta/2; the paper's radii decide with a two-sided
    interval at their level, which already splits it."""
    return delta / 2.0 if radius == "betting" else delta


def better_matrix(K: int, ii, jj, first_better, second_better) -> np.ndarray:
    """``better[a, b]``: "model a has the lower risk than model b" was certified, from the
    pairs (ii[p], jj[p]) and, per pair, whether its first / second model was certified
    better."""
    ii, jj = np.asarray(ii), np.asarray(jj)
    first, second = np.asarray(first_better, dtype=bool), np.asarray(second_better, dtype=bool)
    better = np.zeros((K, K), dtype=bool)
    better[ii[first], jj[first]] = True
    better[jj[second], ii[second]] = True
    return better


def implied_orders(better) -> np.ndarray:
    """The transitive closure of certified orders: ``out[a, b]`` when a chain of certified
    pairs a < c1 < ... < b exists. On the event that every certified order is right (the
    family-wise guarantee, probability >= 1 - delta) every implied order is right too, so
    the closure is certified at the same level."""
    out = np.asarray(better, dtype=bool).copy()
    K = out.shape[0]
    for k in range(K):  # Warshall: allow k as an intermediate model
        out |= out[:, k : k + 1] & out[k : k + 1, :]
    return out


def possible_winners(closure, alive=None) -> np.ndarray:
    """Models that no other model is certified (directly or by implication) better than."""
    closure = np.asarray(closure, dtype=bool)
    out = ~closure.any(axis=0)
    return out if alive is None else out & np.asarray(alive, dtype=bool)


GOALS = ("all", "ranking", "best", "topk")


def tied_pairs(lower, upper, epsilon: float | None) -> np.ndarray:
    """Pairs certified tied within ``epsilon``: |R_A - R_B| < epsilon, from each pair's
    one-sided bounds ``lower`` <= E[u] <= ``upper`` on u = (d + 1) / 2 (d = loss_A - loss_B).

    The difference is 2 E[u] - 1, so the pair is tied when 2 upper - 1 < epsilon and
    2 lower - 1 > -epsilon: the two one-sided tests of an equivalence test (TOST), each
    decided by the bound that also decides the pair's order. Both bounds hold at every step
    on the pair's event, so a tie is false with no more probability than an order, and ties
    and orders hold together on the simultaneous event of all pairs. No ties without
    ``epsilon``."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    if epsilon is None:
        return np.zeros(lower.shape, dtype=bool)
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    return (2.0 * upper - 1.0 < epsilon) & (2.0 * lower - 1.0 > -epsilon)


def rank_intervals(closure) -> tuple[np.ndarray, np.ndarray]:
    """Every model's certified (best, worst) rank, 1 = lowest risk: best = 1 + the models
    certified better than it, worst = K - the models it is certified better than. On the
    event that every certified order is right, each true rank (1 + the models with a
    strictly lower risk) lies in its interval, for every model at once."""
    closure = np.asarray(closure, dtype=bool)
    K = closure.shape[0]
    return 1 + closure.sum(axis=0), K - closure.sum(axis=1)


def rank_groups(closure) -> list[list[int]]:
    """The certified weak order: models in groups, every model of a group certified (by its
    rank interval) better than every model of a later group; within a group the models are
    tied within epsilon, unresolved, or ordered without splitting the group. Models are
    swept in order of (best rank, worst rank) and a group closes when the next model's best
    rank is above every worst rank in it."""
    best, worst = rank_intervals(closure)
    order = np.lexsort((worst, best))
    groups, top = [], 0
    for m in order:
        if groups and best[m] <= top:
            groups[-1].append(int(m))
            top = max(top, int(worst[m]))
        else:
            groups.append([int(m)])
            top = int(worst[m])
    return groups


def topk_status(closure, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(in, out) masks for the K models: certified among the k best (fewer than k models can
    still be better: K - 1 - the models it is certified better than < k), certified outside
    them (at least k models certified better)."""
    closure = np.asarray(closure, dtype=bool)
    K = closure.shape[0]
    if not 1 <= k < K:
        raise ValueError(f"k must be in [1, {K - 1}] for {K} models, got {k!r}")
    could_beat = K - 1 - closure.sum(axis=1)
    return could_beat < k, closure.sum(axis=0) >= k


def pairs_needed(goal: str, closure, ii, jj, alive=None, tied=None, k: int | None = None) -> np.ndarray:
    """Which pairs a ranking goal still needs (a mask over the pairs (ii[p], jj[p])).

    ``all``: every pair until its sign is certified. ``ranking``: pairs whose order is not
    already implied by certified pairs and that are not certified tied. ``best``: such pairs
    between two possible winners only (LUCB-style: a pair with a model already certified worse
    than another cannot change who can win). ``topk``: such pairs with a model whose place in
    or out of the ``k`` best is not certified yet (a pair of two models already placed cannot
    change the set). Stopping a pair is always allowed, so every goal keeps the guarantee.
    """
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    ii, jj = np.asarray(ii), np.asarray(jj)
    closure = np.asarray(closure, dtype=bool)
    tied = np.zeros(ii.size, dtype=bool) if tied is None else np.asarray(tied, dtype=bool)
    undecided = ~(closure[ii, jj] | closure[jj, ii])
    if goal == "all":
        return np.ones(ii.size, dtype=bool)
    open_ = undecided & ~tied
    if goal == "ranking":
        return open_
    if goal == "topk":
        if k is None:
            raise ValueError("goal 'topk' needs k")
        in_, out = topk_status(closure, k)
        placed = in_ | out
        return open_ & ~(placed[ii] & placed[jj])
    win = possible_winners(closure, alive)
    return open_ & win[ii] & win[jj]


def copeland(better) -> tuple[np.ndarray, np.ndarray]:
    """Copeland scores (certified wins minus certified losses) and the models sorted by
    them (ties keep the input order). The scores order models; only ``better`` is certified."""
    better = np.asarray(better, dtype=bool)
    score = better.sum(axis=1) - better.sum(axis=0)
    return score, np.argsort(-score, kind="stable")
