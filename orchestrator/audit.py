"""``certsel audit CONFIG``: does the job's policy keep its guarantee on this data?

The job's policy is repeated ``reps`` times on its replay table, whose full-table risk of
every candidate is the ground truth, each repetition with a fresh random item order shared
by all candidates (as in one job). Per candidate it reports:

* **failure**: for a testing policy (R-Eval / R-AutoEval / R-AutoEval+), the rate of
  certifying R <= alpha for a candidate whose true R is above alpha (the type-I error the
  e-process bounds by delta); for Seq / Cer-Eval, the rate at which the anytime interval
  ever misses the true risk. Each with a one-sided Clopper-Pearson upper bound (99%): the
  guarantee holds on this data when the rate is <= delta within that bound (the lower
  bound is <= delta);
* **power**: the certification rate of candidates whose true R is at most alpha;
* **coverage** of the two-sided anytime interval at level delta (testing policies: the true
  risk is never rejected by the two one-sided tests of App. D.5 at delta/2);
* **labels** used until the decision (mean, 10/50/90% quantiles);
* the **FT-Eval** verdict on the point estimate at the full budget: TOST with the margin
  that Algorithm 1 selects against the plain human-label mean (the classical estimator),
  with RMSE and the one-sample t-test for contrast.

Overall: the family-wise failure rate of the job's procedure (FST / Bonferroni / Holm on the
per-repetition e-values): any candidate with true R > alpha in the certified set.

A pairwise job is audited as the ranking it is: every pair's policy repeated as the job
runs it, a certified order counted wrong when the table's mean losses disagree (an exact
tie included), and the family-wise failure is a repetition with any wrong order.

Testing policies are vectorised over repetitions and candidates (chunks of repetitions);
estimation policies run one repetition at a time (their item choices are adaptive).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from scipy import stats

from certsel.config import RunConfig
from certsel.policies import scheme_rhos
from certsel.policies.autoeval import (
    component_log_evalues,
    effective_observations,
    interval_excludes,
    mix_log_evalues,
    predictable_mixture,
    running_mean,
)
from certsel.policies.comparison import sign_policy_delta
from certsel.policies.ft_eval import bias_variance, ft_eval_passes, select_margin, t_test
from certsel.workers.candidate import make_estimation_policy

from .procedures import get_procedure

BUDGET_GRID = 10  # budgets at which estimates are compared (FT-Eval's Run(E, N, k))
FT_NOTE = ("FT-Eval column: with the dynamic tolerance eps = margin + t s/sqrt(N) the TOST passes exactly when "
           "|bias| < margin (the t term cancels), so it is a point check of the bias at the full budget against "
           "the margin Algorithm 1 selects, not a test. Estimates of a job that stopped early are biased by the "
           "stopping rule (a candidate stops when its evidence is strong), which is why jobs report bounds, not "
           "point estimates, as evidence.")


def clopper_pearson(k: int, n: int, level: float = 0.99) -> tuple[float, float]:
    """One-sided exact binomial bounds (lower, upper) at ``level``."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(1 - level, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(level, k + 1, n - k))
    return lo, hi


@dataclass
class AuditResult:
    cfg: RunConfig
    reps: int
    rows: list  # one dict per candidate (or per pair of a ranking)
    overall: dict
    unit: str = "candidate"

    def table(self) -> str:
        """The per-candidate (per-pair) Markdown table (the docs carry these)."""
        if self.unit == "pair":
            return self._pair_table()
        head = ["candidate", "true R", "H0: R > alpha", "level", "failure", "99% CP upper", "ok", "power", "coverage",
                "labels mean (q10/q50/q90)", "FT-Eval margin", "abs(bias) < margin", "RMSE"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            q = r["labels_q"]
            margin = "-" if r["ft_margin"] is None else f"{r['ft_margin']:.3f}"
            tost = "-" if r["ft_pass"] is None else ("pass" if r["ft_pass"] else "fail")
            cells = [r["candidate"], f"{r['true_risk']:.4f}", "yes" if r["h0"] else "no", f"{r['level']:.4g}",
                     _pct(r["failure"]), _pct(r["failure_upper"]), "yes" if r["ok"] else "NO", _pct(r["power"]),
                     _pct(r["coverage"]), f"{r['labels_mean']:.1f} ({q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f})", margin, tost,
                     f"{r['rmse']:.4f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", FT_NOTE]
        return "\n".join(lines)

    def _pair_table(self) -> str:
        head = ["pair", "true difference", "wrong order", "99% CP upper", "ok", "decided", "interval coverage",
                "items mean (q10/q50/q90)"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            q = r["labels_q"]
            cells = [r["candidate"], f"{r['true_risk']:+.4f}", _pct(r["failure"]), _pct(r["failure_upper"]),
                     "yes" if r["ok"] else "NO", _pct(r["power"]), _pct(r["coverage"]),
                     f"{r['labels_mean']:.1f} ({q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f})"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def summary(self) -> str:
        o = self.overall
        if self.unit == "pair":
            worst = max(r["failure"] for r in self.rows)
            return (f"pairwise {self.cfg.policy.kind} ranking of {o['models']} models, "
                    f"delta = {self.cfg.delta:g} over {o['pairs']} pairs ({o['pair_delta']:.3g} per direction), "
                    f"{self.reps} repetitions: worst per-pair wrong-order rate {worst:.3f}, family-wise failure "
                    f"(any wrong order) {o['familywise_failure']:.3f} (99% CP upper {o['failure_upper']:.3f}), "
                    f"{o['mean_certified']:.1f} orders certified on average, "
                    f"{o['evaluations_mean']:.0f} of {o['evaluations_full']} model evaluations; "
                    f"{'OK' if o['ok'] else 'GUARANTEE VIOLATED'}")
        worst = max((r["failure"] for r in self.rows if r["failure"] is not None), default=0.0)
        return (f"{self.cfg.policy.kind} ({self.cfg.policy.strategy.describe()}), alpha = {self.cfg.alpha:g}, delta = "
                f"{self.cfg.delta:g}, n = {self.cfg.budget.n}, {self.reps} repetitions: worst per-candidate failure "
                f"{worst:.3f}, family-wise failure of {o['procedure']} {o['familywise_failure']:.3f} "
                f"(99% CP upper {o['failure_upper']:.3f}); {'OK' if o['ok'] else 'GUARANTEE VIOLATED'}")


def _pct(x):
    return "-" if x is None else f"{x:.3f}"


def _orders(rng, reps: int, n_items: int, m: int) -> np.ndarray:
    """``reps`` random item orders, the first ``m`` items of each (as in a job's seeded order)."""
    return np.argsort(rng.random((reps, n_items)), axis=1)[:, :m]


def _testing_chunk(cfg, human, judge, orders, n, r, rhos):
    """Per repetition and candidate: max log E, first crossing, estimates on the budget grid,
    and whether the true risk is excluded by the two-sided interval."""
    h = human[:, orders[:, :n]].transpose(1, 0, 2)  # (reps, K, n)
    jl = ju = None
    if judge is not None and np.any(rhos != 0):
        jl = judge[:, orders[:, :n]].transpose(1, 0, 2)
        ju = judge[:, orders[:, n : n * (1 + r)]].transpose(1, 0, 2)
    obs = effective_observations(h, jl, ju, rhos=rhos)
    w0 = np.full(rhos.size, 1.0 / rhos.size)
    kw = dict(delta=cfg.delta, betting=cfg.policy.strategy, horizon=n)
    comps = component_log_evalues(obs, cfg.alpha, ci_scale=False, **kw)  # (reps, K, S, n)
    log_e = mix_log_evalues(comps, w0)
    # the estimate the driver reports after t labels: the unbiased predictable mixture (eq. 10, 13)
    t_grid = np.unique(np.linspace(1, n, BUDGET_GRID).round().astype(int))
    est = running_mean(predictable_mixture(obs.q, comps, w0), t_grid)  # (reps, K, G)
    classical = np.cumsum(h, axis=-1)[..., t_grid - 1] / t_grid
    return log_e, est, classical, t_grid, obs


def audit(cfg: RunConfig, data, *, reps: int = 1000, seed: int = 0, chunk: int = 50, progress=None,
          workers: int | None = None) -> AuditResult:
    """Repeat ``cfg``'s policy ``reps`` times on its replay table (see the module docstring).

    Seq / Cer-Eval repetitions (and a ranking's) run in ``workers`` processes (default: one
    per CPU); the result is the same for any number of workers."""
    table = data.table
    if table is None:
        raise ValueError("certsel audit needs a replay job (a data: section with recorded losses and ground truth)")
    if reps < 10:
        raise ValueError(f"--reps must be at least 10, got {reps}")
    names = data.names
    truth = table.true_risk
    K, I = table.human.shape
    rng = np.random.default_rng(seed)
    kind = cfg.policy.kind
    workers = max(1, (os.cpu_count() or 1) if workers is None else int(workers))
    proc = get_procedure(cfg.procedure)
    if proc.ranking:
        return _pairwise(cfg, table, names, reps, rng, progress, workers)
    n = cfg.budget.n
    testing = cfg.policy.is_testing
    levels = proc.candidate_deltas(cfg.delta, K)  # each candidate's own level, as the job runs it
    if testing:
        rhos = scheme_rhos(kind)
        r = cfg.budget.r if cfg.policy.uses_judge else 0
        thresholds = -np.log(levels)
        max_log_e = np.empty((reps, K))
        first = np.empty((reps, K), dtype=np.int64)
        missed = np.empty((reps, K), dtype=bool)
        est, classical = [], []
        for start in range(0, reps, chunk):
            m = min(chunk, reps - start)
            orders = _orders(rng, m, I, n * (1 + r))
            log_e, e, c, t_grid, obs = _testing_chunk(cfg, table.human, table.judge if r else None, orders, n, r, rhos)
            hit = log_e >= thresholds[:, None]
            max_log_e[start : start + m] = log_e.max(axis=-1)
            first[start : start + m] = np.where(hit.any(-1), hit.argmax(-1) + 1, n)
            missed[start : start + m] = interval_excludes(obs, truth[None, :], delta=float(levels.min()),
                                                          betting=cfg.policy.strategy, horizon=n)
            est.append(e)
            classical.append(c)
            if progress is not None:
                progress(start + m, reps)
        est, classical = np.concatenate(est), np.concatenate(classical)
        certified = max_log_e >= thresholds
        fam = proc.certified(np.minimum(max_log_e, 700), cfg.delta)
    else:
        certified, first, missed, est, classical, t_grid = _estimation(cfg, table, truth, reps, rng, progress,
                                                                       workers)
        fam = proc.certified_by_decisions(certified)
    rows = []
    for k in range(K):
        h0 = bool(truth[k] > cfg.alpha)
        if testing:
            fails = int(certified[:, k].sum()) if h0 else 0
        else:
            fails = int(missed[:, k].sum())
        lo, hi = clopper_pearson(fails, reps)
        applies = h0 or not testing
        ft = _ft_eval(est[:, k, :], classical[:, k, :], float(truth[k]))
        rows.append({
            "candidate": names[k], "true_risk": float(truth[k]), "h0": h0,
            "failure": fails / reps if applies else None, "failure_upper": hi if applies else None,
            "failure_lower": lo if applies else None, "ok": bool(lo <= levels[k]) if applies else True,
            "level": float(levels[k]),
            "power": None if h0 else float(certified[:, k].mean()),
            "coverage": float(1 - missed[:, k].mean()),
            "labels_mean": float(first[:, k].mean()),
            "labels_q": [float(x) for x in np.quantile(first[:, k], [0.1, 0.5, 0.9])],
            **ft,
        })
    bad = truth > cfg.alpha
    fam_fail = (fam & bad[None, :]).any(axis=1)
    k_fail = int(fam_fail.sum())
    lo, hi = clopper_pearson(k_fail, reps)
    overall = {"procedure": cfg.procedure, "familywise_failure": k_fail / reps, "failure_upper": hi,
               "failure_lower": lo, "ok": lo <= cfg.delta and all(r["ok"] for r in rows),
               "mean_certified": float(fam.sum(axis=1).mean()), "budget_grid": [int(t) for t in t_grid]}
    return AuditResult(cfg, reps, rows, overall)


def _ft_eval(est: np.ndarray, classical: np.ndarray, truth: float) -> dict:
    """FT-Eval of the policy's estimate (reps, budgets) against the classical mean."""
    bv = bias_variance(est[:, -1], truth)
    tt = t_test(est[:, -1], truth)
    try:
        search = select_margin(est, classical, truth)
        margin = search.margin
        passed = None if margin is None else bool(ft_eval_passes(est[:, -1], truth, margin).passed[-1])
    except ValueError:
        margin, passed = None, None
    return {"ft_margin": margin, "ft_pass": passed, "rmse": float(bv.rmse), "bias": float(bv.bias),
            "t_p": float(tt.p_value)}


def _features(cfg, table):
    """Item embeddings for Cer-Eval's 1-NN partition (None when the job does not use them)."""
    if cfg.policy.kind != "cer-eval" or cfg.policy.partition != "embeddings":
        return None
    from certsel.workers.replay import load_features

    return load_features(cfg.data.features, table.items)


def _ranking_once(job) -> tuple:
    """One repetition of a pairwise job's ranking (module level: it runs in worker processes).
    Returns per pair (wrong order, decided, interval ever missed, items used) and the
    number of model evaluations (a model's items counted once across its pairs)."""
    cfg, human, features, scores, seed = job
    K, I = human.shape
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    pair_delta = sign_policy_delta(cfg.delta / P, cfg.policy.radius)
    n = min(cfg.budget.n, I)
    truth = human.mean(axis=1)
    out = np.zeros((4, P), dtype=np.int64)
    items_of = [set() for _ in range(K)]
    for p in range(P):
        u = (human[ii[p]] - human[jj[p]] + 1.0) / 2.0
        mu = float(u.mean())
        pol = make_estimation_policy(cfg.policy.kind, I, delta=pair_delta, alpha=0.5, radius=cfg.policy.radius,
                                     seed=seed, features=features, partition=cfg.policy.partition,
                                     judge_scores=None if scores is None else scores[p])
        missed = False
        while not pol.done and pol.n_labeled < n:
            items = pol.next_items(min(cfg.budget.batch, n - pol.n_labeled))
            if items.size == 0:
                break
            pol.update(items, u[items])
            lo, hi = pol.ci
            missed |= not (lo - 1e-12 <= mu <= hi + 1e-12)
        d = pol.decision  # -1: model ii has the lower risk, +1: model jj
        diff = truth[ii[p]] - truth[jj[p]]
        out[:, p] = ((d == -1 and diff >= 0) or (d == 1 and diff <= 0), d != 0, missed, pol.n_labeled)
        items_of[ii[p]].update(pol.labeled_items.tolist())
        items_of[jj[p]].update(pol.labeled_items.tolist())
    return out, sum(len(x) for x in items_of)


def _repeat(fn, jobs: list, workers: int, progress) -> list:
    """``fn`` over the repetitions' jobs, in worker processes when ``workers`` > 1; the
    results are in job order and do not depend on the number of workers."""
    if workers <= 1 or len(jobs) <= 1:
        out = []
        for i, job in enumerate(jobs):
            out.append(fn(job))
            if progress is not None:
                progress(i + 1, len(jobs))
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out = []
    ctx = multiprocessing.get_context("spawn" if multiprocessing.get_start_method() != "fork" else "fork")
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        for i, res in enumerate(ex.map(fn, jobs, chunksize=max(1, len(jobs) // (4 * workers)))):
            out.append(res)
            if progress is not None:
                progress(i + 1, len(jobs))
    return out


def _pairwise(cfg, table, names, reps, rng, progress, workers: int = 1) -> AuditResult:
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
    features = _features(cfg, table)
    scores = None
    if cfg.policy.partition == "judge":
        scores = [(table.judge[ii[p]] - table.judge[jj[p]] + 1.0) / 2.0 for p in range(P)]
    seeds = [int(x) for x in rng.integers(2**31, size=reps)]
    got = _repeat(_ranking_once, [(cfg, table.human, features, scores, sd) for sd in seeds], workers, progress)
    per = np.stack([g[0] for g in got])  # (reps, 4, P)
    wrong, decided, missed, used = (per[:, i] for i in range(4))
    wrong, decided, missed = wrong.astype(bool), decided.astype(bool), missed.astype(bool)
    evaluations = np.array([g[1] for g in got])
    rows = []
    for p in range(P):
        k = int(wrong[:, p].sum())
        lo, hi = clopper_pearson(k, reps)
        rows.append({
            "candidate": f"{names[ii[p]]} vs {names[jj[p]]}", "true_risk": float(diff[p]), "h0": bool(diff[p] == 0),
            "failure": k / reps, "failure_upper": hi, "failure_lower": lo, "ok": lo <= cfg.delta,
            "power": float(decided[:, p].mean()), "coverage": float(1 - missed[:, p].mean()),
            "labels_mean": float(used[:, p].mean()),
            "labels_q": [float(x) for x in np.quantile(used[:, p], [0.1, 0.5, 0.9])],
            "ft_margin": None, "ft_pass": None, "rmse": None, "bias": None, "t_p": None,
        })
    fam = wrong.any(axis=1)
    k_fail = int(fam.sum())
    lo, hi = clopper_pearson(k_fail, reps)
    overall = {"procedure": cfg.procedure, "familywise_failure": k_fail / reps, "failure_upper": hi,
               "failure_lower": lo, "ok": lo <= cfg.delta and all(r["ok"] for r in rows),
               "mean_certified": float(decided.sum(axis=1).mean()), "pairs": P, "models": K, "pair_delta": pair_delta,
               "evaluations_mean": float(evaluations.mean()), "evaluations_full": int(K * n),
               "saved_fraction": float(1 - evaluations.mean() / (K * n)),
               "wrong_order_rate": k_fail / reps,  # repetitions with any wrong certified order
               "interval_misses": int(missed.sum()), "budget_grid": []}
    return AuditResult(cfg, reps, rows, overall, unit="pair")


def _estimation_once(job) -> tuple:
    """One repetition of Seq / Cer-Eval for every candidate (module level: it runs in worker
    processes): decision, labels to decide, interval ever missed, estimates on the grid."""
    cfg, table, truth, features, t_grid, seed = job
    K, I = table.human.shape
    n = min(cfg.budget.n, I)
    levels = get_procedure(cfg.procedure).candidate_deltas(cfg.delta, K)  # as the job runs them
    certified = np.zeros(K, dtype=bool)
    missed = np.zeros(K, dtype=bool)
    first = np.zeros(K, dtype=np.int64)
    est = np.zeros((K, t_grid.size))
    classical = np.zeros((K, t_grid.size))
    for k in range(K):
        pol = make_estimation_policy(cfg.policy.kind, I, delta=float(levels[k]), alpha=cfg.alpha, radius=cfg.policy.radius,
                                     seed=seed + [k], features=features, partition=cfg.policy.partition,
                                     judge_scores=None if table.judge is None else table.judge[k])
        losses = table.human[k]
        decided_at = 0
        g = 0
        while pol.n_labeled < n:
            step = min(max(1, cfg.budget.batch), n - pol.n_labeled)
            if g < t_grid.size:  # stop exactly at the next grid budget
                step = min(step, int(t_grid[g]) - pol.n_labeled)
            items = pol.next_items(step)
            if items.size == 0:
                break
            pol.update(items, losses[items])
            lo, hi = pol.ci
            if not (lo - 1e-12 <= truth[k] <= hi + 1e-12):
                missed[k] = True
            if pol.decision != 0 and not decided_at:
                decided_at = pol.n_labeled
                certified[k] = pol.decision == -1
            while g < t_grid.size and pol.n_labeled >= t_grid[g]:
                est[k, g] = pol.estimate
                classical[k, g] = losses[pol.labeled_items].mean()
                g += 1
        est[k, g:] = pol.estimate
        classical[k, g:] = losses[pol.labeled_items].mean() if pol.n_labeled else np.nan
        first[k] = decided_at or pol.n_labeled
    return certified, first, missed, est, classical


def _estimation(cfg, table, truth, reps, rng, progress, workers: int = 1):
    """Seq / Cer-Eval repeated ``reps`` times: decisions against alpha at the level the job
    uses, interval misses, labels used, estimates on the budget grid."""
    n = min(cfg.budget.n, table.human.shape[1])
    t_grid = np.unique(np.linspace(1, n, BUDGET_GRID).round().astype(int))
    features = _features(cfg, table)
    seeds = [[int(x) for x in rng.integers(2**31, size=2)] for _ in range(reps)]
    got = _repeat(_estimation_once, [(cfg, table, truth, features, t_grid, sd) for sd in seeds], workers, progress)
    certified, first, missed, est, classical = (np.stack([g[i] for g in got]) for i in range(5))
    return certified, first, missed, est, classical, t_grid


def write_audit(result: AuditResult, outdir) -> list:
    """audit.json, audit.md and audit.png (failure rates with their bounds against delta,
    coverage against 1 - delta) into ``outdir``."""
    import json
    import pathlib

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"config": result.cfg.model_dump(mode="json"), "reps": result.reps, "overall": result.overall,
               "candidates": result.rows}
    (out / "audit.json").write_text(json.dumps(payload, indent=1, allow_nan=False))
    (out / "audit.md").write_text(f"# certsel audit\n\n{result.summary()}\n\n{result.table()}\n")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    x = np.arange(len(result.rows))
    fail = np.array([np.nan if r["failure"] is None else r["failure"] for r in result.rows])
    upper = np.array([np.nan if r["failure_upper"] is None else r["failure_upper"] for r in result.rows])
    axes[0].bar(x, fail, color="tab:red", label="failure rate")
    axes[0].scatter(x, upper, marker="_", color="k", s=80, label="99% Clopper-Pearson upper bound")
    axes[0].axhline(result.cfg.delta, color="tab:blue", ls="--", label="delta")
    axes[0].set_xlabel("candidate")
    axes[0].set_ylabel("failure rate")
    axes[0].legend(fontsize=8)
    axes[1].bar(x, [r["coverage"] for r in result.rows], color="tab:green")
    axes[1].axhline(1 - result.cfg.delta, color="tab:blue", ls="--", label="1 - delta")
    axes[1].set_ylim(min(0.8, 1 - 2 * result.cfg.delta), 1.0)
    axes[1].set_xlabel("candidate")
    axes[1].set_ylabel("anytime interval coverage")
    axes[1].legend(fontsize=8)
    fig.suptitle(result.summary()[:140], fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "audit.png", dpi=110)
    plt.close(fig)
    return [out / "audit.json", out / "audit.md", out / "audit.png"]
