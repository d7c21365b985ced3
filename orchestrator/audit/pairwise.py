"""``certsel audit`` of a pairwise job: the ranking replayed as the job runs it, every printed
claim checked against the table.

Each repetition is the job itself with a fresh seed (rounds, bets, round sizes, goal, ``pairwise.epsilon``), run by
``replay`` (:func:`~certsel.orchestrator.engine.ranking_replay.replay_ranking`). Claims are checked against the full
table's mean losses R:

* an **order** "A better than B" (direct or implied) is wrong when R(A) >= R(B), an exact tie included;
* a **tie** "A ~ B within epsilon" is false when |R(A) - R(B)| >= epsilon;
* a **rank interval** misses when the true rank (1 + the models with a strictly lower mean) lies outside it;
* a **rank group** is wrong when a model of an earlier group is not strictly better than every later one;
* a **top-k** claim is wrong when a certified-in model has fewer than K - k models strictly worse, or a
  certified-out one fewer than k strictly better.

Per pair, the rates are against the pair's level delta / P (a wrong order or false tie needs one of its two one-sided
bounds, each at delta / (2P), to miss). The family-wise failure, a repetition with any wrong claim, is what the job's
guarantee bounds by delta.
"""

from __future__ import annotations

import numpy as np

from .base import AuditResult, clopper_pearson, failure_cells, overall_cells, repeat

_ORDERED, _WRONG, _TIED, _FALSE_TIE, _ITEMS, _COVERED = range(6)


def claims_checked(ranking, names: list[str], truth: np.ndarray) -> tuple[np.ndarray, dict]:
    """One repetition's claims against ``truth`` (mean losses): per pair (i < j in ``names`` order) the rows
    ordered, wrongly ordered, tied, falsely tied, items used, interval covering, shape (6, P); and the repetition's
    rank-interval, group and top-k misses."""
    K = len(names)
    at = {m: k for k, m in enumerate(names)}
    ii, jj = np.triu_indices(K, 1)
    index = {(a, b): p for p, (a, b) in enumerate(zip(ii.tolist(), jj.tolist(), strict=True))}

    def pair_of(a: str, b: str) -> int:  # the pair of two model names, in either order
        return index[tuple(sorted((at[a], at[b])))]

    out = np.zeros((6, ii.size), dtype=np.int64)
    for a, beaten in ranking.better.items():
        for b in beaten:
            p = pair_of(a, b)
            out[_ORDERED, p] = 1
            out[_WRONG, p] |= int(truth[at[a]] >= truth[at[b]])
    eps = ranking.epsilon
    for claim in ranking.tied:
        a, b = claim.split(" ~ ")
        p = pair_of(a, b)
        out[_TIED, p] = 1
        out[_FALSE_TIE, p] = int(abs(truth[at[a]] - truth[at[b]]) >= eps)
    for key, n in ranking.items_per_pair.items():
        a, b = key.split(" vs ")
        out[_ITEMS, pair_of(a, b)] = n
    for key, (lo, hi) in ranking.difference_intervals.items():
        a, b = key.split(" - ")
        d = truth[at[a]] - truth[at[b]]
        out[_COVERED, pair_of(a, b)] = int(lo - 1e-12 <= d <= hi + 1e-12)
    rank = {m: 1 + int(np.sum(truth < truth[at[m]])) for m in names}
    interval_missed = {m: not (lo <= rank[m] <= hi) for m, (lo, hi) in ranking.rank_intervals.items()}
    groups = ranking.rank_groups
    group_wrong = any(truth[at[a]] >= truth[at[b]] for g, first in enumerate(groups) for later in groups[g + 1:]
                      for a in first for b in later)
    topk_wrong = False
    if ranking.topk is not None:
        # "in": at least K - k models certified worse; "out": at least k certified better
        k = ranking.topk.k
        topk_wrong = (any(np.sum(truth > truth[at[m]]) < K - k for m in ranking.topk.certified_in)
                      or any(np.sum(truth < truth[at[m]]) < k for m in ranking.topk.certified_out))
    return out, {"interval_missed": interval_missed, "group_wrong": group_wrong, "topk_wrong": topk_wrong}


def pairwise_audit(cfg, data, reps, rng, progress, workers: int, replay) -> AuditResult:
    """The ranking job replayed ``reps`` times (one seed each), its claims checked (module docstring)."""
    table, names = data.table, data.names
    truth = np.asarray(table.true_risk, dtype=np.float64)
    K = len(names)
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    seeds = [int(x) for x in rng.integers(2**31, size=reps)]
    got = repeat(replay, [(cfg, data, sd) for sd in seeds], workers, progress)
    checked = [claims_checked(rk, names, truth) for rk, _ in got]
    per = np.stack([c[0] for c in checked])  # (reps, 6, P)
    ordered, wrong, tied, false_tie, used, covered = (per[:, i] for i in range(6))
    wrong_claim = (wrong + false_tie) > 0
    evaluations = np.array([sum(h) for _, h in got])
    missed = np.array([[c[1]["interval_missed"].get(m, False) for m in names] for c in checked])
    group_wrong = np.array([c[1]["group_wrong"] for c in checked])
    topk_wrong = np.array([c[1]["topk_wrong"] for c in checked])
    diff = truth[ii] - truth[jj]
    rows = []
    for p in range(P):
        rows.append({
            "candidate": f"{names[ii[p]]} vs {names[jj[p]]}", "true_risk": float(diff[p]), "h0": bool(diff[p] == 0),
            # a wrong order or a false tie of one pair has probability <= delta / P
            **failure_cells(int(wrong_claim[:, p].sum()), reps, cfg.delta / P),
            "ordered": float(ordered[:, p].mean()), "wrong_order": float(wrong[:, p].mean()),
            "tied": float(tied[:, p].mean()), "false_tie": float(false_tie[:, p].mean()),
            "power": float(((ordered[:, p] + tied[:, p]) > 0).mean()), "coverage": float(covered[:, p].mean()),
            "labels_mean": float(used[:, p].mean()),
            "labels_q": [float(x) for x in np.quantile(used[:, p], [0.1, 0.5, 0.9])],
            "ft_margin": None, "ft_pass": None, "rmse": None, "bias": None, "t_p": None,
        })
    fam = wrong_claim.any(axis=1) | missed.any(axis=1) | group_wrong | topk_wrong
    k_fail = int(fam.sum())
    rank = [1 + int(np.sum(truth < truth[k])) for k in range(K)]
    overall = {
        "procedure": cfg.procedure, **overall_cells(k_fail, reps, cfg.delta, rows), "goal": cfg.pairwise.goal,
        "epsilon": cfg.pairwise.epsilon, "mean_certified": float(ordered.sum(axis=1).mean()),
        "mean_tied": float(tied.sum(axis=1).mean()), "pairs": P, "models": K, "pair_delta": cfg.delta / P,
        "evaluations_mean": float(evaluations.mean()), "evaluations_full": int(K * min(cfg.budget.n, table.human.shape[1])),
        "saved_fraction": float(1 - evaluations.mean() / (K * min(cfg.budget.n, table.human.shape[1]))),
        "wrong_order_rate": float(wrong.any(axis=1).mean()),  # repetitions with any wrong certified order
        "false_tie_rate": float(false_tie.any(axis=1).mean()),
        "rank_interval_miss_rate": float(missed.any(axis=1).mean()),
        "rank_group_error_rate": float(group_wrong.mean()), "topk_error_rate": float(topk_wrong.mean()),
        "rank_intervals": [{"model": names[k], "true_rank": rank[k], "coverage": float(1 - missed[:, k].mean()),
                            "upper": clopper_pearson(int(missed[:, k].sum()), reps)[1]} for k in range(K)],
        "interval_misses": int((1 - covered).sum()), "budget_grid": [],
    }
    return AuditResult(cfg, reps, rows, overall, unit="pair")
