"""Threshold decisions, pairwise comparison and certified ranking of models (section 6.4).

Two models A and B are compared on the same items through the paired difference
d = loss_A - loss_B in [-1, 1], mapped to u = (d + 1) / 2 in [0, 1]; E[u] < 1/2 means A has
the lower risk. A comparison draws items in a seeded random order and stops as soon as the
sign of E[d] is certified:

* ``method="betting"`` (default): two anytime-valid betting e-processes (the R-Eval test of
  :mod:`certsel.policies.autoeval` with target 1/2), one for "A better" on u and one for
  "B better" on 1 - u, each at level delta/2. Ville's inequality bounds the probability of
  ever certifying a false sign by delta.
* ``method="seq"``: Seq's confidence sequence on u (``radius="betting"``: the betting
  sequence for sampling without replacement of :mod:`certsel.policies.stratified`, whose
  target is the mean of u over the test set; ``"paper"``: adaptive Hoeffding, Lemma B.3),
  certify when the two-sided interval at delta excludes 1/2.
* ``method="cer-eval"``: the Cer-Eval policy on u with ``threshold=1/2`` and a partitioner
  (the paper's section 6.4 setting), its one-sided decisions at delta/2 per direction.

Every method spends at most delta/2 on each direction, so a false sign, including any sign
at an exact tie E[d] = 0, is certified with probability at most delta.

:func:`rank_models` runs every pair at level delta / P (Bonferroni over the P = K(K-1)/2
pairs), so the probability that *any* certified order is wrong is at most delta. Pairs share
one item order, so a model labelled for several pairs pays for the longest of them only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import check_level, check_losses
from .autoeval import log_evalue_paths, scheme_rhos
from .cer_eval import RADII, CerEval
from .radius import _adaptive_hoeffding
from .stratified import seq_paths

METHODS = ("betting", "seq", "cer-eval")


def _check_method(method, radius):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if radius not in RADII:
        raise ValueError(f"radius must be one of {RADII}, got {radius!r}")


def sign_policy_delta(delta: float, radius: str) -> float:
    """The level to give a Seq / Cer-Eval policy with ``threshold=1/2`` so that its sign
    decisions are false with probability <= ``delta``, an exact tie included.

    The betting policies decide with one-sided bounds at their own level, one per
    direction, so each direction gets delta/2. The paper's radii decide with a two-sided
    interval at their level, which already splits it."""
    return delta / 2.0 if radius == "betting" else delta


def paired_losses(loss_a, loss_b) -> np.ndarray:
    """u = (loss_a - loss_b + 1) / 2 in [0, 1] for losses in [0, 1] on the same items."""
    a = check_losses(loss_a, "loss_a", (0.0, 1.0))
    b = check_losses(loss_b, "loss_b", (0.0, 1.0))
    if a.shape != b.shape:
        raise ValueError(f"loss_a and loss_b must be on the same items, got shapes {a.shape} and {b.shape}")
    return (a - b + 1.0) / 2.0


@dataclass(frozen=True)
class SignPaths:
    """Outcome of sign tests on a batch of paired sequences (leading axes = batch).

    ``winner``: +1 if "A better" (E[d] < 0) was certified first, -1 if "B better", 0 if
    neither by the end; ``n_used``: labels (items) used when it stopped (the full length if
    undecided).
    """

    winner: np.ndarray
    n_used: np.ndarray


def _first(hit: np.ndarray):
    any_ = hit.any(axis=-1)
    return any_, np.where(any_, hit.argmax(axis=-1) + 1, hit.shape[-1] + 1)


def sign_test_paths(u, *, delta: float, method: str = "betting", betting: str = "up", radius: str = "betting",
                    horizon: int | None = None) -> SignPaths:
    """Vectorised sign certification on paired sequences ``u`` of shape (..., n), in order.

    ``method`` is "betting" or "seq" (Cer-Eval is sequential per run; use
    :func:`compare_pair`). ``horizon`` is the planned maximum length for the UP prior. With
    ``method="seq"`` and ``radius="betting"`` each row must be the whole test set in a
    uniformly random order (sampling without replacement; the target is the test-set mean).
    """
    delta = check_level(delta, "delta")
    _check_method(method, radius)
    if method == "cer-eval":
        raise ValueError("sign_test_paths is vectorised for 'betting' and 'seq'; use compare_pair for 'cer-eval'")
    u = check_losses(u, "u", (0.0, 1.0))
    n = u.shape[-1]
    if method == "betting":
        kw = {"alpha": 0.5, "delta": delta / 2.0, "rhos": scheme_rhos("r-eval"), "betting": betting, "horizon": horizon}
        thr = np.log(2.0 / delta)
        a_hit, a_t = _first(log_evalue_paths(u, **kw) >= thr)
        b_hit, b_t = _first(log_evalue_paths(1.0 - u, **kw) >= thr)
    else:
        t = np.arange(1, n + 1, dtype=np.float64)
        if radius == "paper":
            center = np.cumsum(u, axis=-1) / t
            rad = _adaptive_hoeffding(t, delta)
            low, high = center - rad, center + rad
        else:
            bounds = seq_paths(u.reshape(-1, n), delta=delta).reshape(u.shape + (4,))
            low, high = bounds[..., 2], bounds[..., 3]  # two-sided: delta/2 per direction
        a_hit, a_t = _first(high < 0.5)
        b_hit, b_t = _first(low > 0.5)
    winner = np.where(a_hit & (a_t <= b_t), 1, np.where(b_hit, -1, 0))
    n_used = np.where(winner != 0, np.minimum(a_t, b_t), n)
    return SignPaths(winner.astype(np.int64), n_used.astype(np.int64))


@dataclass(frozen=True)
class PairResult:
    winner: int  # +1: A has the lower risk (certified), -1: B, 0: undecided
    n_used: int
    mean_difference: float  # mean of loss_A - loss_B over the items used


def compare_pair(loss_a, loss_b, *, delta: float, method: str = "betting", seed=None, partitioner=None,
                 betting: str = "up", radius: str = "betting", **policy_kwargs) -> PairResult:
    """Compare two models on the same items in a seeded random order; stop at a certified sign."""
    u = paired_losses(loss_a, loss_b)
    if u.ndim != 1:
        raise ValueError("compare_pair takes 1-D losses; use sign_test_paths for batches")
    delta = check_level(delta, "delta")
    _check_method(method, radius)
    if method == "cer-eval":
        if partitioner is None:
            raise ValueError("method 'cer-eval' needs a partitioner (e.g. NearestNeighborPartition(embeddings))")
        p = CerEval(u.size, partitioner, delta=sign_policy_delta(delta, radius), threshold=0.5, radius=radius, strict=True,
                    seed=seed, **policy_kwargs)
        res = p.run(u)
        used = p.labeled_items
        return PairResult(-res.decision, res.n_labeled, float(np.mean(2.0 * u[used] - 1.0)))
    order = np.random.default_rng(seed).permutation(u.size)
    res = sign_test_paths(u[order], delta=delta, method=method, betting=betting, radius=radius)
    n = int(res.n_used)
    return PairResult(int(res.winner), n, float(np.mean(2.0 * u[order[:n]] - 1.0)))


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


@dataclass(frozen=True)
class Ranking:
    """Certified pairwise ranking of K models.

    ``better[i, j]`` is True when "model i has lower risk than model j" was certified;
    ``n_used[i, j]`` the items the pair needed; ``order`` sorts models by their Copeland
    score (certified wins minus certified losses); ``labels_per_model`` counts the items each
    model had to be evaluated on (pairs share one item order); ``full_cost`` = K * n.
    """

    names: list
    better: np.ndarray
    n_used: np.ndarray
    score: np.ndarray
    order: np.ndarray
    labels_per_model: np.ndarray
    full_cost: int
    pair_delta: float

    @property
    def labels_used(self) -> int:
        return int(self.labels_per_model.sum())


def rank_models(losses, *, delta: float, names=None, method: str = "betting", seed=None, betting: str = "up",
                radius: str = "betting") -> Ranking:
    """Certify the order of every pair of models with family-wise error <= delta.

    ``losses`` is (K models, n items) in [0, 1] on a common item set.
    """
    z = check_losses(losses, "losses", (0.0, 1.0))
    if z.ndim != 2 or z.shape[0] < 2:
        raise ValueError(f"losses must be (models, items) with at least 2 models, got shape {z.shape}")
    delta = check_level(delta, "delta")
    _check_method(method, radius)
    if method == "cer-eval":
        raise ValueError("rank_models supports 'betting' and 'seq'; Cer-Eval pairs are compared with compare_pair")
    K, n = z.shape
    names = list(range(K)) if names is None else list(names)
    if len(names) != K:
        raise ValueError(f"got {len(names)} names for {K} models")
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    order = np.random.default_rng(seed).permutation(n)
    u = (z[ii][:, order] - z[jj][:, order] + 1.0) / 2.0
    res = sign_test_paths(u, delta=delta / P, method=method, betting=betting, radius=radius)
    better = better_matrix(K, ii, jj, res.winner == 1, res.winner == -1)
    n_used = np.zeros((K, K), dtype=np.int64)
    n_used[ii, jj] = n_used[jj, ii] = res.n_used
    score, order = copeland(better)
    labels = n_used.max(axis=1)
    return Ranking(names, better, n_used, score, order, labels, K * n, delta / P)
