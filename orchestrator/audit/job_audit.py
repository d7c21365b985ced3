"""``certsel audit CONFIG``: does the job's policy keep its guarantee on this data?

The policy is repeated ``reps`` times on the replay table (full-table risks are the ground truth), each repetition
with a fresh random item order shared by all candidates. Per candidate: **failure** (testing policies: certifying
R <= alpha when the true R > alpha; Seq / Cer-Eval: the anytime interval ever missing the true risk) with one-sided
99% Clopper-Pearson bounds and a :class:`~.base.Verdict` against the candidate's level; **power**; **coverage** of
the two-sided anytime interval at delta (testing policies: two one-sided tests of App. D.5 at delta/2); **labels**
to the decision; the **FT-Eval** check at the full budget (Algorithm 1's margin against the human-label mean, with
RMSE and a t-test). Overall: the procedure's family-wise failure (a candidate with true R > alpha certified), whose
verdict against delta is the audit's (failed also when any row failed). See docs/reliability.md, "`certsel audit
CONFIG`". A pairwise job is replayed and every claim it prints checked (:mod:`.pairwise`).

Testing policies are vectorised over chunks of repetitions and candidates; estimation policies run one repetition
at a time (their item choices are adaptive).
"""

from __future__ import annotations

import os

import numpy as np

from certsel.config import RunConfig
from certsel.errors import InputError
from certsel.policies.kinds import PolicyInputs, PolicySettings, Replication
from certsel.policies.autoeval import (
    component_log_evalues,
    effective_observations,
    mix_log_evalues,
    predictable_mixture,
    running_mean,
)
from certsel.policies.autoeval_bounds import interval_excludes
from certsel.policies.ft_eval import bias_variance, ft_eval_passes, select_margin, t_test
from certsel.workers.replay import label_orders

from .base import BUDGET_GRID, AuditResult, clopper_pearson, failure_cells, job_features, overall_cells, repeat
from .pairwise import pairwise_audit
from .stratified import stratified_repetitions

__all__ = ["AuditResult", "audit", "clopper_pearson", "write_audit"]

def _orders(rng, reps: int, n_items: int, m: int) -> np.ndarray:
    """``reps`` random item orders, the first ``m`` items of each (as in a job's seeded order)."""
    return np.argsort(rng.random((reps, n_items)), axis=1)[:, :m]


def _testing_chunk(cfg, human, judge, orders, n, r, rhos):
    """Log e-value paths, estimates and classical means on the budget grid, the grid, and the observations."""
    h = human[:, orders[:, :n]].transpose(1, 0, 2)  # (reps, K, n)
    jl = ju = None
    if judge is not None and np.any(rhos != 0):
        jl = judge[:, orders[:, :n]].transpose(1, 0, 2)
        ju = judge[:, orders[:, n : n * (1 + r)]].transpose(1, 0, 2)
    obs = effective_observations(h, jl, ju, rhos=rhos, observation=cfg.policy.observation,
                                 sampling=cfg.policy.sampling_for(human.shape[1]))
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
          workers: int | None = None, ranking_replay=None) -> AuditResult:
    """Repeat ``cfg``'s policy ``reps`` times on its replay table (see the module docstring).

    Seq / Cer-Eval and ranking repetitions run in ``workers`` processes (default: one per CPU); the result does not
    depend on their number. A ranking needs ``ranking_replay`` (the engine's
    :func:`~certsel.orchestrator.engine.ranking_replay.replay_ranking`)."""
    table = data.table
    if table is None:
        raise ValueError("certsel audit needs a replay job (a data: section with recorded losses and ground truth)")
    if reps < 10:
        raise ValueError(f"--reps must be at least 10, got {reps}")
    names = data.names
    truth = table.true_risk
    K = table.human.shape[0]
    rng = np.random.default_rng(seed)
    kind = cfg.policy.policy_kind
    workers = max(1, (os.cpu_count() or 1) if workers is None else int(workers))
    proc = cfg.proc
    if proc.ranking:
        if ranking_replay is None:
            raise ValueError("a ranking is audited by replaying the job's rounds: use "
                             "certsel.orchestrator.commands.audit.audit, which passes the engine's replay")
        return pairwise_audit(cfg, data, reps, rng, progress, workers, ranking_replay)
    testing = cfg.policy.is_testing
    levels = proc.candidate_deltas(cfg.delta, K)  # each candidate's own level, as the job runs it
    if cfg.scheduling.start == "pilot":
        if kind.replication is not Replication.BETTING:
            raise InputError(f"certsel audit: scheduling.start: pilot is audited for r-eval, r-autoeval and "
                             f"r-autoeval+, not {kind.name!r}")
        return _pilot_audit(cfg, data, reps, rng, progress, chunk)
    if kind.replication is Replication.STRATIFIED:
        max_log_e, first, missed, est, classical, t_grid = stratified_repetitions(cfg, table, truth, reps, rng,
                                                                                  progress, workers)
        certified = max_log_e >= -np.log(levels)
        fam = proc.certified(np.minimum(max_log_e, 700), cfg.delta)
    elif kind.replication is Replication.BETTING:
        max_log_e, first, missed, est, classical, t_grid = betting_repetitions(cfg, table, truth, reps, rng, progress,
                                                                               chunk)
        certified = max_log_e >= -np.log(levels)
        fam = proc.certified(np.minimum(max_log_e, 700), cfg.delta)
    elif not testing:
        certified, first, missed, est, classical, t_grid = _estimation(cfg, table, truth, reps, rng, progress,
                                                                       workers)
        fam = proc.certified_by_decisions(certified)
    else:  # a registered testing kind with no vectorised repetition here
        raise InputError(f"certsel audit: no repetitions for policy.kind {kind.name!r} (it audits r-eval, "
                         "r-autoeval, r-autoeval+, judge-stratified and every estimation kind)")
    return _result(cfg, names, truth, levels, certified, fam, first, missed, est, classical, t_grid, reps)


def _pilot_audit(cfg: RunConfig, data, reps: int, rng, progress, chunk: int) -> AuditResult:
    """A fixed sequence that starts from a pilot: repetition i is the job with seed i's draws (pilot stream and item
    order), its sequence from that repetition's start; a config before the start is not tested."""
    from certsel.policies.pilot import run_pilot

    table, names, truth = data.table, data.names, data.table.true_risk
    K = table.human.shape[0]
    proc = cfg.proc
    seeds = rng.integers(2**31, size=reps)
    sch = cfg.scheduling
    starts = np.array([run_pilot(table.judge, cfg.alpha, sch.pilot_items, sch.pilot_margin, int(s), human=table.human,
                                 check=sch.pilot_check).start for s in seeds])  # the pilot of the job with that seed
    tested = np.arange(K)[None, :] >= starts[:, None]  # (reps, K)
    max_log_e, first, missed, est, classical, t_grid = betting_repetitions(cfg, table, truth, reps, None, progress,
                                                                           chunk, seeds=seeds)
    levels = proc.candidate_deltas(cfg.delta, K)
    certified = (max_log_e >= -np.log(levels)) & tested
    # the sequence from each repetition's start: the configs before it pass through the prefix rule
    fam = proc.certified(np.where(tested, np.minimum(max_log_e, 700), 700.0), cfg.delta) & tested
    return _result(cfg, names, truth, levels, certified, fam, first, missed, est, classical, t_grid, reps)


def _result(cfg, names, truth, levels, certified, fam, first, missed, est, classical, t_grid, reps) -> AuditResult:
    """The audit's rows (per candidate) and overall figures from its repetitions."""
    testing = cfg.policy.is_testing
    rows = []
    for k in range(len(names)):
        h0 = bool(truth[k] > cfg.alpha)
        if testing:
            fails = int(certified[:, k].sum()) if h0 else 0
        else:
            fails = int(missed[:, k].sum())
        applies = h0 or not testing
        ft = _ft_eval(est[:, k, :], classical[:, k, :], float(truth[k]))
        cells = failure_cells(fails, reps, levels[k]) if applies else \
            {"failure": None, "failure_upper": None, "failure_lower": None, "verdict": None, "level": float(levels[k])}
        rows.append({
            "candidate": names[k], "true_risk": float(truth[k]), "h0": h0, **cells,
            "power": None if h0 else float(certified[:, k].mean()),
            "coverage": float(1 - missed[:, k].mean()),
            "labels_mean": float(first[:, k].mean()),
            "labels_q": [float(x) for x in np.quantile(first[:, k], [0.1, 0.5, 0.9])],
            **ft,
        })
    bad = truth > cfg.alpha
    fam_fail = (fam & bad[None, :]).any(axis=1)
    overall = {"procedure": cfg.procedure, **overall_cells(int(fam_fail.sum()), reps, cfg.delta, rows),
               "mean_certified": float(fam.sum(axis=1).mean()), "budget_grid": [int(t) for t in t_grid]}
    return AuditResult(cfg, reps, rows, overall)


def betting_repetitions(cfg: RunConfig, table, truth, reps: int, rng, progress=None, chunk: int = 50,
                        seeds=None):
    """R-Eval / R-AutoEval(+) on ``reps`` random orders: max log E (reps, K), labels to the first crossing of the
    candidate's level, whether the two-sided interval missed ``truth``, estimates on the budget grid. With ``seeds``
    (reps,), repetition i draws the order of a job with seed ``seeds[i]``
    (:func:`~certsel.workers.replay.label_orders`), so jobs sharing a seed (a multi-task job's tasks) keep their
    coupling."""
    K, I = table.human.shape
    n, rhos = cfg.budget.n, cfg.policy.policy_kind.rhos
    levels = cfg.proc.candidate_deltas(cfg.delta, K)
    r = cfg.budget.r if cfg.policy.uses_judge else 0
    wor = cfg.policy.without_replacement
    thresholds = -np.log(levels)
    max_log_e = np.empty((reps, K))
    first = np.empty((reps, K), dtype=np.int64)
    missed = np.empty((reps, K), dtype=bool)
    est, classical = [], []
    for start in range(0, reps, chunk):
        m = min(chunk, reps - start)
        if seeds is not None:  # the orders jobs with these seeds draw: human items, then judge-only items
            orders = np.stack([np.concatenate(label_orders(I, int(x), n, r, wor)) for x in seeds[start : start + m]])
        elif wor:  # the judge-only items in an order of their own
            orders = np.concatenate([_orders(rng, m, I, n), _orders(rng, m, I, r * n)], axis=1)
        else:
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
    return max_log_e, first, missed, np.concatenate(est), np.concatenate(classical), t_grid


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


def _estimation_once(job) -> tuple:
    """One repetition of Seq / Cer-Eval for every candidate (module level: it runs in worker processes)."""
    cfg, table, truth, features, t_grid, seed = job
    K, I = table.human.shape
    n = min(cfg.budget.n, I)
    levels = cfg.proc.candidate_deltas(cfg.delta, K)  # as the job runs them
    certified = np.zeros(K, dtype=bool)
    missed = np.zeros(K, dtype=bool)
    first = np.zeros(K, dtype=np.int64)
    est = np.zeros((K, t_grid.size))
    classical = np.zeros((K, t_grid.size))
    for k in range(K):
        settings = PolicySettings(alpha=cfg.alpha, delta=float(levels[k]), budget=n, seed=seed + [k],
                                  radius=cfg.policy.radius, partition=cfg.policy.partition)
        pol = cfg.policy.policy_kind.build(settings, PolicyInputs(
            I, features=features, judge_scores=None if table.judge is None else table.judge[k]))
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
    """Seq / Cer-Eval repeated ``reps`` times: decisions, labels used, interval misses, estimates on the grid."""
    n = min(cfg.budget.n, table.human.shape[1])
    t_grid = np.unique(np.linspace(1, n, BUDGET_GRID).round().astype(int))
    features = job_features(cfg, table)
    seeds = [[int(x) for x in rng.integers(2**31, size=2)] for _ in range(reps)]
    got = repeat(_estimation_once, [(cfg, table, truth, features, t_grid, sd) for sd in seeds], workers, progress)
    certified, first, missed, est, classical = (np.stack([g[i] for g in got]) for i in range(5))
    return certified, first, missed, est, classical, t_grid


def write_audit(result: AuditResult, outdir) -> list:
    """Write audit.json, audit.md and audit.png into ``outdir``; returns their paths."""
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
    _audit_figure(result, plt).savefig(out / "audit.png", dpi=110)
    plt.close("all")
    return [out / "audit.json", out / "audit.md", out / "audit.png"]


def _audit_figure(result: AuditResult, plt):
    """Failure rates (with 99% upper bounds and levels) and coverage per candidate; the summary as the title."""
    import textwrap

    rows = result.rows
    names = [r["candidate"] for r in rows]
    y = np.arange(len(rows))[::-1]  # the first candidate on top, as in the tables
    fail = np.array([np.nan if r["failure"] is None else r["failure"] for r in rows])
    upper = np.array([np.nan if r["failure_upper"] is None else r["failure_upper"] for r in rows])
    level = np.array([np.nan if r["failure"] is None else r["level"] for r in rows])  # where a failure can occur
    title = textwrap.wrap(result.summary(), 150)
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.6 + 0.24 * len(rows) + 0.16 * len(title)), sharey=True)
    pairs = result.unit == "pair"
    axes[0].barh(y, fail, color="tab:red", label="rate of a wrong order or a false tie" if pairs
                 else "failure rate (true R > alpha: certified anyway)")
    axes[0].scatter(upper, y, marker="|", color="k", s=120, label="99% Clopper-Pearson upper bound", zorder=3)
    axes[0].scatter(level, y, marker="d", color="tab:blue", s=18, label="its level", zorder=3)
    axes[0].axvline(result.cfg.delta, color="tab:blue", ls="--", lw=1, label=f"delta = {result.cfg.delta:g}")
    axes[0].set_xlabel(f"wrong claims over {result.reps} repetitions" if pairs else
                       f"failure rate over {result.reps} repetitions (blank: R <= alpha, nothing to fail)")
    axes[0].set_yticks(y, names, fontsize=8 if len(rows) <= 30 else 6)
    axes[0].legend(fontsize=7, loc="best")
    axes[1].barh(y, [r["coverage"] for r in rows], color="tab:green")
    axes[1].axvline(1 - result.cfg.delta, color="tab:blue", ls="--", lw=1, label=f"1 - delta = {1 - result.cfg.delta:g}")
    axes[1].set_xlim(min(0.8, 1 - 2 * result.cfg.delta), 1.0)
    axes[1].set_xlabel("the difference interval's coverage of the true difference" if pairs
                       else "anytime interval coverage of the true R")
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle("\n".join(title), fontsize=8, x=0.01, ha="left")
    fig.tight_layout()
    return fig
