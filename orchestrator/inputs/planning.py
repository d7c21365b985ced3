"""``certsel plan CONFIG``: which policy and judge ratio is cheapest for this job, in its prices.

From a pilot of ``m`` items per candidate (drawn with a seed of its own, independent of the job's item order), it
estimates for every candidate the fewest human labels a test would need (:mod:`certsel.policies.limits`: log(1/level) /
KL_inf for R-Eval, the split observation's oracle with r judge-only labels for R-AutoEval+, the prediction-powered floor
for judge-stratified testing), scales them by each policy kind's measured ``efficiency``, caps them at the budget, and
prices them with the job's ``costs:``.

Why choosing with it keeps the guarantee: the choice is a function of the pilot's draws only, independent of the job's
own seeded draws, so conditionally on the choice the job's test is the same level-delta test. Pilot labels are never
evidence; the predictions (ratios measured on one table's frontier) rank policies, they certify nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.config import RunConfig, CostsConfig
from certsel.policies.kinds import POLICY_KINDS
from certsel.policies.limits import label_limit, ppi_limit, split_limit

JUDGE_RATIOS = (1, 2, 3, 5)
RHOS = np.linspace(0.0, 1.0, 11)  # a coarse grid is enough to rank policies


@dataclass(frozen=True)
class PlanRow:
    """One policy's expected spend on the job."""

    policy: str
    r: int | None
    human: float
    generations: float
    judge: float
    cost: float
    certified: int  # candidates expected to certify within the budget


def pilot(table, m: int, seed: int) -> np.ndarray:
    """``m`` distinct items, drawn with their own generator (never the job's order)."""
    n_items = table.human.shape[1]
    if not 1 <= m <= n_items:
        raise ValueError(f"--pilot must be between 1 and the {n_items} items, got {m}")
    return np.random.default_rng([int(seed), 0x9E37]).choice(n_items, size=m, replace=False)


def expected_labels(limits: np.ndarray, ratio: float, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Expected human labels per candidate and whether it certifies within ``budget``."""
    need = ratio * limits
    ok = np.isfinite(need) & (need <= budget)
    return np.where(ok, np.ceil(need), budget), ok


def evaluated(cfg: RunConfig, ok: np.ndarray) -> np.ndarray:
    """Which candidates the procedure runs: under FST the prefix up to the first expected failure and its look-ahead,
    otherwise every candidate."""
    if not cfg.proc.needs_order or ok.all():
        return np.ones(ok.size, dtype=bool)
    stop = int(np.argmin(ok)) + cfg.scheduling.lookahead
    return np.arange(ok.size) <= stop


def plan(cfg: RunConfig, data, *, m: int = 50, seed: int = 0) -> list[PlanRow]:
    """Expected spend of R-Eval, R-AutoEval+ at several judge ratios and judge-stratified testing on ``cfg``'s replay
    data, from a pilot of ``m`` items per candidate."""
    table = data.table
    if table is None:
        raise ValueError("certsel plan needs a replay job (data:): its pilot comes from the loss table")
    costs = cfg.costs or CostsConfig()
    items = pilot(table, m, seed)
    K, N = table.human.shape
    n = cfg.budget.n
    levels = cfg.proc.candidate_deltas(cfg.delta, K)
    h = table.human[:, items]
    rows = []

    def add(policy, r, limits, generations_per_label, judge_per_label, fixed_per_candidate=0):
        labels, ok = expected_labels(limits, POLICY_KINDS.lookup(policy).efficiency, n)
        run = evaluated(cfg, ok)
        human = float(labels[run].sum())
        fixed = fixed_per_candidate * int(run.sum())
        gens = human * generations_per_label + fixed
        judge = human * judge_per_label + fixed
        cost = human * costs.human + gens * costs.generation + judge * costs.judge
        rows.append(PlanRow(policy, r, human, gens, judge, cost, int((ok & run).sum())))

    add("r-eval", None, np.array([label_limit(h[k], cfg.alpha, levels[k]) for k in range(K)]), 1.0, 0.0)
    if table.judge is not None:
        j = table.judge[:, items]
        for r in JUDGE_RATIOS:
            if n * (1 + r) > N:
                continue
            lim = np.array([split_limit(h[k], j[k], cfg.alpha, levels[k], r=r, rhos=RHOS, draws=4000).labels
                            for k in range(K)])
            add("r-autoeval+", r, lim, 1.0 + r, 1.0 + r)
        floor = np.array([ppi_limit(h[k], j[k], cfg.alpha, levels[k], rhos=RHOS).labels for k in range(K)])
        add("judge-stratified", None, floor, 0.0, 0.0, fixed_per_candidate=N)  # every item generated and judged
    return rows


def plan_table(cfg: RunConfig, rows: list[PlanRow], m: int) -> str:
    """The plan as Markdown. With ``costs:``, each policy priced in the job's unit and the cheapest named; without,
    label and call counts only (no prices, so no "cheapest"), and the policy with the fewest human labels next to the
    one with the fewest calls in all."""
    priced = cfg.costs is not None
    head = [f"Expected spend of {cfg.name!r} by policy, from a pilot of {m} items per candidate (its own draws, "
            f"never evidence): alpha = {cfg.alpha:g}, delta = {cfg.delta:g}, n = {cfg.budget.n}, procedure "
            f"{cfg.procedure}", ""]
    cols = "| policy | judge-only labels per human label | human labels | target generations | judge calls | " \
           "expected to certify |"
    if priced:
        out = head + [cols + f" cost ({cfg.costs.unit}) |", "|---|---|---|---|---|---|---|"]
    else:
        out = head + [cols, "|---|---|---|---|---|---|"]
    for row in rows:
        line = (f"| {row.policy} | {'-' if row.r is None else row.r} | {row.human:,.0f} | {row.generations:,.0f} | "
                f"{row.judge:,.0f} | {row.certified} |")
        out.append(line + (f" {row.cost:,.6g} |" if priced else ""))
    cheapest, fewest = cheapest_rows(rows)
    if priced:
        out += ["", f"cheapest: {describe(cheapest)} ({cheapest.cost:,.6g} {cfg.costs.unit}); fewest human labels: "
                f"{describe(fewest)} ({fewest.human:,.0f})"]
    else:
        calls = min(rows, key=lambda r: (r.human + r.generations + r.judge, r.human))
        out += ["", f"no prices (the job has no costs: section), so none is called the cheapest. Fewest human labels: "
                f"{describe(fewest)} ({fewest.human:,.0f}, with {fewest.judge:,.0f} judge calls); fewest labels and "
                f"calls in all: {describe(calls)} ({calls.human:,.0f} human labels, {calls.generations:,.0f} "
                f"generations, {calls.judge:,.0f} judge calls). Add costs: {{human: ..., generation: ..., judge: ..., "
                f"unit: ...}} to price them."]
    out.append("Predictions are rough (ratios to the limit measured on one table); the job's guarantee does not depend "
               "on them: any policy chosen here is tested on the job's own draws.")
    return "\n".join(out)


def cheapest_rows(rows: list[PlanRow]) -> tuple[PlanRow, PlanRow]:
    """(the cheapest row in the job's prices, the row with the fewest human labels)."""
    return min(rows, key=lambda r: (r.cost, r.human)), min(rows, key=lambda r: (r.human, r.cost))


def describe(row: PlanRow) -> str:
    """``policy.kind`` (and ``budget.r``) to put in the job file."""
    return row.policy + ("" if row.r is None else f" with budget.r = {row.r}")
