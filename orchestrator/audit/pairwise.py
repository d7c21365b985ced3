"""``certsel audit`` of a pairwise job: the ranking repeated as the job runs it.

Every repetition runs the pairs in rounds, each round advancing the pairs that the job's
goal (``pairwise.goal``) still needs; a certified order is wrong when the table's mean
losses disagree (an exact tie included), and the family-wise failure is a repetition with
any wrong order.
"""

from __future__ import annotations

import numpy as np

from certsel.policies.comparison import better_matrix, implied_orders, pairs_needed, sign_policy_delta
from certsel.policies.kinds import PolicyInputs, PolicySettings

from .base import AuditResult, failure_cells, job_features, overall_cells, repeat

def ranking_once(job) -> tuple:
    """One repetition of a pairwise job's ranking, in rounds as the job runs it (module level:
    it runs in worker processes): each round the pairs the goal still needs
    (``pairwise.goal``) advance by one batch. Returns per pair (wrong order, decided,
    interval ever missed, items used) and the number of model evaluations (a model's items
    counted once across its pairs)."""
    cfg, human, features, scores, seed = job
    K, I = human.shape
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    pair_delta = sign_policy_delta(cfg.delta / P, cfg.policy.radius)
    n = min(cfg.budget.n, I)
    truth = human.mean(axis=1)
    us = [(human[ii[p]] - human[jj[p]] + 1.0) / 2.0 for p in range(P)]
    settings = PolicySettings(alpha=0.5, delta=pair_delta, budget=I, seed=seed, radius=cfg.policy.radius,
                              partition=cfg.policy.partition, strict=True)
    pols = [cfg.policy.policy_kind.build(settings, PolicyInputs(
                I, features=features, judge_scores=None if scores is None else scores[p])) for p in range(P)]
    missed = np.zeros(P, dtype=bool)
    while True:
        direct = better_matrix(K, ii, jj, [q.decision == -1 for q in pols], [q.decision == 1 for q in pols])
        needed = pairs_needed(cfg.pairwise.goal, implied_orders(direct), ii, jj)
        open_ = [p for p in range(P) if needed[p] and not pols[p].done and pols[p].n_labeled < n]
        if not open_:
            break
        for p in open_:
            items = pols[p].next_items(min(cfg.budget.batch, n - pols[p].n_labeled))
            pols[p].update(items, us[p][items])
            lo, hi = pols[p].ci
            mu = float(us[p].mean())
            missed[p] |= not (lo - 1e-12 <= mu <= hi + 1e-12)
    out = np.zeros((4, P), dtype=np.int64)
    items_of = [set() for _ in range(K)]
    for p, pol in enumerate(pols):
        d = pol.decision  # -1: model ii has the lower risk, +1: model jj
        diff = truth[ii[p]] - truth[jj[p]]
        out[:, p] = ((d == -1 and diff >= 0) or (d == 1 and diff <= 0), d != 0, missed[p], pol.n_labeled)
        items_of[ii[p]].update(pol.labeled_items.tolist())
        items_of[jj[p]].update(pol.labeled_items.tolist())
    return out, sum(len(x) for x in items_of)


def pairwise_audit(cfg, table, names, reps, rng, progress, workers: int = 1) -> AuditResult:
    """The ranking repeated ``reps`` times as a pairwise job runs it: every pair's Seq /
    Cer-Eval policy on u = (loss_i - loss_j + 1)/2 with threshold 1/2 at delta/(2P) per
    direction, stopped at a certified sign or the budget. A certified order is wrong when
    the table's mean losses say otherwise (ties included); the family-wise failure is a
    repetition with any wrong order, the guarantee being <= delta."""
    K, I = table.human.shape
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    pair_delta = sign_policy_delta(cfg.delta / P, cfg.policy.radius)
    n = min(cfg.budget.n, I)
    diff = table.human.mean(axis=1)[ii] - table.human.mean(axis=1)[jj]
    features = job_features(cfg, table)
    scores = None
    if cfg.policy.partition == "judge":
        scores = [(table.judge[ii[p]] - table.judge[jj[p]] + 1.0) / 2.0 for p in range(P)]
    seeds = [int(x) for x in rng.integers(2**31, size=reps)]
    got = repeat(ranking_once, [(cfg, table.human, features, scores, sd) for sd in seeds], workers, progress)
    per = np.stack([g[0] for g in got])  # (reps, 4, P)
    wrong, decided, missed, used = (per[:, i] for i in range(4))
    wrong, decided, missed = wrong.astype(bool), decided.astype(bool), missed.astype(bool)
    evaluations = np.array([g[1] for g in got])
    rows = []
    for p in range(P):
        rows.append({
            "candidate": f"{names[ii[p]]} vs {names[jj[p]]}", "true_risk": float(diff[p]), "h0": bool(diff[p] == 0),
            # a pair's wrong order has probability <= delta/P (both directions of its sign)
            **failure_cells(int(wrong[:, p].sum()), reps, cfg.delta / P),
            "power": float(decided[:, p].mean()), "coverage": float(1 - missed[:, p].mean()),
            "labels_mean": float(used[:, p].mean()),
            "labels_q": [float(x) for x in np.quantile(used[:, p], [0.1, 0.5, 0.9])],
            "ft_margin": None, "ft_pass": None, "rmse": None, "bias": None, "t_p": None,
        })
    fam = wrong.any(axis=1)
    k_fail = int(fam.sum())
    overall = {"procedure": cfg.procedure, **overall_cells(k_fail, reps, cfg.delta, rows),
               "mean_certified": float(decided.sum(axis=1).mean()), "pairs": P, "models": K, "pair_delta": pair_delta,
               "evaluations_mean": float(evaluations.mean()), "evaluations_full": int(K * n),
               "saved_fraction": float(1 - evaluations.mean() / (K * n)),
               "wrong_order_rate": k_fail / reps,  # repetitions with any wrong certified order
               "interval_misses": int(missed.sum()), "budget_grid": []}
    return AuditResult(cfg, reps, rows, overall, unit="pair")


