"""``certsel plan CONFIG``: which policy and judge ratio is cheapest for this job, in its prices.

The plan runs the job's own engine on tables drawn from a pilot of ``m`` items per candidate
(:mod:`certsel.orchestrator.engine.forecast`) once for each policy it compares: R-Eval, R-AutoEval+ at the judge ratios
the table holds, judge-stratified testing, and the job as configured. Every row and the forecast line are means over
the same drawn tables, so each number printed comes from one simulation; the rows are priced with the job's
``costs:``. This module holds what needs no engine: the pilot's draw, the policies compared, the rows and their table.

Why choosing with it keeps the guarantee: the choice is a function of the pilot's draws only, independent of the job's
own seeded draws, so conditionally on the choice the job's test is the same level-delta test. Pilot labels are never
evidence; the forecasts rank policies, they certify nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.config import RunConfig

JUDGE_RATIOS = (1, 2, 3, 5)
_RATIO_POLICIES = ("r-autoeval", "r-autoeval+")  # the kinds whose budget.r is a judge ratio


@dataclass(frozen=True)
class PlanRow:
    """One policy's forecast spend on the job: means over the plan's simulated runs."""

    policy: str
    r: int | None
    human: float
    human_se: float  # the mean's standard error over the runs
    generations: float
    judge: float
    cost: float
    certified: float  # candidates certified, on average
    configured: bool = False  # the job as its file says


def pilot(table, m: int, seed: int) -> np.ndarray:
    """``m`` distinct items, drawn with their own generator (never the job's order)."""
    n_items = table.human.shape[1]
    if not 1 <= m <= n_items:
        raise ValueError(f"--pilot must be between 1 and the {n_items} items, got {m}")
    return np.random.default_rng([int(seed), 0x9E37]).choice(n_items, size=m, replace=False)


def variants(cfg: RunConfig, n_items: int, has_judge: bool) -> list[tuple[str, int | None, bool]]:
    """The policies a plan compares, as ``(policy.kind, budget.r or None, whether it is the job as configured)``:
    R-Eval; with a judge column, R-AutoEval+ at each ratio whose budget fits the table (n (1 + r) items) and
    judge-stratified testing; the job's own policy among them, or first where it is none of them."""
    kind = cfg.policy.kind
    own = (kind, cfg.budget.r if kind in _RATIO_POLICIES else None)
    out = [("r-eval", None)]
    if has_judge:
        out += [("r-autoeval+", r) for r in JUDGE_RATIOS if cfg.budget.n * (1 + r) <= n_items]
        out.append(("judge-stratified", None))
    if own not in out:
        out.insert(0, own)
    return [(k, r, (k, r) == own) for k, r in out]


def plan_table(cfg: RunConfig, rows: list[PlanRow], m: int, sims: int) -> str:
    """The plan as Markdown. With ``costs:``, each policy priced in the job's unit and the cheapest named; without,
    label and call counts only (no prices, so no "cheapest"), and the policy with the fewest human labels next to the
    one with the fewest calls in all."""
    priced = cfg.costs is not None
    head = [f"Expected spend of {cfg.name!r} by policy: the job's own engine run {sims} times for each, on the same "
            f"tables drawn from a pilot of {m} items per candidate (its own draws, never evidence): alpha = "
            f"{cfg.alpha:g}, delta = {cfg.delta:g}, n = {cfg.budget.n}, procedure {cfg.procedure}", ""]
    cols = "| policy | judge-only labels per human label | human labels | target generations | judge calls | " \
           "candidates certified |"
    if priced:
        out = head + [cols + f" cost ({cfg.costs.unit}) |", "|---|---|---|---|---|---|---|"]
    else:
        out = head + [cols, "|---|---|---|---|---|---|"]
    for row in rows:
        line = (f"| {row.policy}{' (as configured)' if row.configured else ''} | {'-' if row.r is None else row.r} | "
                f"{row.human:,.0f} ± {row.human_se:,.0f} | {row.generations:,.0f} | {row.judge:,.0f} | "
                f"{row.certified:.1f} |")
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
    out.append("'±': the mean's standard error over the runs. The job's guarantee does not depend on these forecasts: "
               "any policy chosen here is tested on the job's own draws.")
    return "\n".join(out)


def cheapest_rows(rows: list[PlanRow]) -> tuple[PlanRow, PlanRow]:
    """(the cheapest row in the job's prices, the row with the fewest human labels)."""
    return min(rows, key=lambda r: (r.cost, r.human)), min(rows, key=lambda r: (r.human, r.cost))


def describe(row: PlanRow) -> str:
    """``policy.kind`` (and ``budget.r``) to put in the job file."""
    return row.policy + ("" if row.r is None else f" with budget.r = {row.r}")
