"""What a replay job will spend, forecast by running it: every number ``certsel plan`` prints.

Counting each candidate's expected labels alone misses what a job does around its tests: a pilot start skips the
configs before the frontier, futility and budget stops end hopeless candidates early, a fixed sequence ends at its
first failure, Holm certifies what it certifies at looser levels. Rather than model each, the forecast runs the job's
own engine (:func:`~.driver.run_job`, in this process, no label store, no tracking) on ``sims`` tables drawn from the
plan's pilot items, so every rule the job would apply is applied. The plan's table (:func:`plan`) is that forecast for
each policy it compares (the job as configured among them), each run on the same drawn tables with the same seeds: its
rows and its line for the job as configured are one simulation, so they cannot disagree.

Each simulated table gives every candidate ``N`` item columns (the job's table size) drawn from the pilot's items with
the weights of a Bayesian bootstrap (Dirichlet(1, ..., 1) over the pilot items, then drawn with those weights; Rubin,
*The Bayesian Bootstrap*, Ann. Statist. 1981): the table's risks vary around the pilot's means as a posterior over
them does, so the forecast averages over what the pilot leaves unknown instead of taking its means as the truth. The
same columns serve every candidate, keeping the candidates' losses on an item together (a judge's with its human's).

It certifies nothing: the pilot's items are drawn with their own generator (:func:`~..inputs.planning.pilot`), apart
from the job's order, and their labels never enter the job's evidence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from certsel.config import CostsConfig, RunConfig
from certsel.orchestrator.inputs.jobdata import JobData
from certsel.orchestrator.inputs.planning import PlanRow, variants
from certsel.workers.replay import LossTable

from .driver import run_job
from .runtime import LocalRuntime


@dataclass(frozen=True)
class Forecast:
    """The job's spend over ``sims`` simulated runs: means, and the range of its human labels."""

    sims: int
    human: float
    human_se: float  # the mean's standard error over the runs (0 for one run)
    human_low: int
    human_high: int
    judge: float
    requests: float
    generations: float  # the targets' generations (a request that is not a judge call), on average
    certified: float  # candidates certified, on average
    selections: dict  # how often each candidate (None: none) was selected

    def line(self) -> str:
        """The forecast as the plan prints it."""
        top = max(self.selections.items(), key=lambda kv: kv[1])
        return (f"the job as configured: about {self.human:,.0f} ± {self.human_se:,.0f} human labels (the mean's "
                f"standard error; from {self.human_low:,} to {self.human_high:,} over {self.sims} simulated runs), "
                f"{self.judge:,.0f} judge labels, "
                f"{self.certified:.1f} candidates certified, selecting {top[0] or 'none'} in {top[1]} of "
                f"{self.sims} runs: its own engine run on tables drawn from the pilot's items (every stop, the "
                f"pilot start and the procedure's end as the job applies them)")


def draw_columns(table: LossTable, items: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A simulated table's item columns: ``table``'s width drawn from ``items`` with Bayesian-bootstrap weights."""
    weights = rng.dirichlet(np.ones(items.size))
    return rng.choice(items, size=table.human.shape[1], p=weights)


def table_on(table: LossTable, cols: np.ndarray) -> LossTable:
    """``table`` with the item columns ``cols`` (every candidate's, the judge's with its human's)."""
    return dataclasses.replace(table, human=table.human[:, cols],
                               judge=None if table.judge is None else table.judge[:, cols])


def simulated_table(table: LossTable, items: np.ndarray, rng: np.random.Generator) -> LossTable:
    """A table of the same shape whose item columns are drawn from ``items`` with Bayesian-bootstrap weights."""
    return table_on(table, draw_columns(table, items, rng))


def drawn_columns(data: JobData, items: np.ndarray, sims: int, seed: int) -> list[np.ndarray]:
    """The ``sims`` simulated tables' columns of a plan at ``seed`` (one generator: every policy gets the same)."""
    if sims < 1:
        raise ValueError(f"--sims must be at least 1, got {sims}")
    if data.table is None:
        raise ValueError("certsel plan needs a replay job (data:): its pilot comes from the loss table")
    rng = np.random.default_rng([int(seed), 0xF0CA])
    return [draw_columns(data.table, np.asarray(items), rng) for _ in range(sims)]


def forecast(cfg: RunConfig, data: JobData, items: np.ndarray, *, sims: int = 8, seed: int = 0) -> Forecast:
    """The job ``cfg`` run ``sims`` times on tables drawn from the pilot ``items`` (each run its own seed)."""
    return forecast_on(cfg, data, drawn_columns(data, items, sims, seed), seed=seed)


def forecast_on(cfg: RunConfig, data: JobData, columns: list[np.ndarray], *, seed: int = 0) -> Forecast:
    """The job ``cfg`` run on each of the simulated tables ``columns`` (run ``s`` at seed ``1000 seed + s``)."""
    quiet = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": None})})
    spent, certified, chosen = [], [], {}
    for s, cols in enumerate(columns):
        # the run's data: the drawn table, no pilot start yet (the run takes its own), no raw scores kept
        sim = dataclasses.replace(data, table=table_on(data.table, cols), pilot=None, recovery=None, paired=None)
        res = run_job(quiet.model_copy(update={"seed": int(seed) * 1000 + s}), sim, LocalRuntime(1),
                      collect_labels=False)
        spent.append(res.spent)
        certified.append(len(res.certified))
        chosen[res.selected] = chosen.get(res.selected, 0) + 1
    sims = len(columns)
    human = np.array([x["human"] for x in spent])
    judge = np.array([x["judge"] for x in spent], dtype=np.float64)
    requests = np.array([x["requests"] for x in spent], dtype=np.float64)
    se = float(human.std(ddof=1) / np.sqrt(sims)) if sims > 1 else 0.0
    return Forecast(sims, float(human.mean()), se, int(human.min()), int(human.max()), float(judge.mean()),
                    float(requests.mean()), float((requests - judge).mean()), float(np.mean(certified)), chosen)


def plan(cfg: RunConfig, data: JobData, items: np.ndarray, *, sims: int, seed: int = 0,
         variant) -> tuple[list[PlanRow], Forecast, list[str]]:
    """Each policy the plan compares (:func:`~..inputs.planning.variants`), forecast on the same ``sims`` tables drawn
    from the pilot ``items``: its rows, the job as configured's forecast (its row's numbers) and, for a policy that
    cannot run this job, the one line saying why. ``variant(kind, r)``: that policy's job and data (a job file loaded
    again with ``policy.kind`` and ``budget.r`` set, so that it is checked as the user's own would be)."""
    columns = drawn_columns(data, items, sims, seed)
    costs = cfg.costs or CostsConfig()
    rows, skipped, mine = [], [], None
    for kind, r, configured in variants(cfg, data.table.human.shape[1], data.table.judge is not None):
        if configured:
            vcfg, vdata = cfg, data
        else:
            try:
                vcfg, vdata = variant(kind, r)
            except ValueError as err:  # InputError too: this policy cannot run the job (a key it lacks, a column)
                skipped.append(f"{kind}{'' if r is None else f' with budget.r = {r}'}: not planned ({err})")
                continue
        f = forecast_on(vcfg, vdata, columns, seed=seed)
        mine = f if configured else mine
        cost = f.human * costs.human + f.generations * costs.generation + f.judge * costs.judge
        rows.append(PlanRow(kind, r, f.human, f.human_se, f.generations, f.judge, cost, f.certified, configured))
    return rows, mine, skipped
