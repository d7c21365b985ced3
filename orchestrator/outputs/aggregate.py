"""An aggregate job's certificate in its own terms: R = sum_t w_t R_t over its tasks.

The job ran as one test on the tasks' stacked table (:mod:`certsel.orchestrator.inputs.stacked_tasks`); its records
are already in the aggregate's units (:meth:`~certsel.workers.contracts.Snapshot.in_units`). This module states what
was stacked and each candidate's per-task labels and full-table risks.
"""

from __future__ import annotations

import numpy as np

from certsel.orchestrator.results.records import JobResult

from .numbers import _round


def aggregate_words(result: JobResult) -> str:
    """The aggregate risk in words: "R = 0.333 R_sentiment + 0.333 R_sum (equal weights)"."""
    agg = result.data.aggregate
    terms = " + ".join(f"{p.weight:.3g} R_{p.name}" for p in agg.parts)
    how = {"equal": "equal weights", "size": "weights by task size"}.get(agg.weights, "the job's weights")
    return f"R = {terms} ({how})"


def subject(result: JobResult, loss: str) -> str:
    """The guarantee's first sentences for an aggregate: what R is and how it was tested."""
    agg, cfg = result.data.aggregate, result.cfg
    scale = ("every factor is 1 (weights by size): the stacked mean is R itself" if agg.unit == 1.0
             else f"M = {agg.unit:.6g}, so the stacked mean is R / M, tested at alpha / M = {cfg.alpha / agg.unit:.6g}, "
                  "and every bound printed is M times the stacked test's")
    return (f"R is a candidate's weighted risk over its tasks, {aggregate_words(result)}, R_t its mean {loss} over "
            f"task t's items. It is tested as one table: the tasks' {result.data.n_items} items stacked, task t's "
            f"losses scaled by w_t N / (N_t M) ({scale}); the job labels the stacked items in a random order "
            "without replacement.")


def claim(result: JobResult) -> dict:
    """What an aggregate job certifies and how its table was stacked (``selection.json``)."""
    agg, cfg = result.data.aggregate, result.cfg
    return {"kind": "aggregate", "words": aggregate_words(result), "weights": agg.weights, "unit": agg.unit,
            "policy_alpha": cfg.alpha / agg.unit,
            "tasks": [{"name": p.name, "weight": _round(p.weight, 6), "items": p.items, "factor": _round(p.factor, 6),
                       "data": p.path} for p in agg.parts],
            "note": ("one test on the stacked tasks: task t's losses scaled by w_t N / (N_t M), M the largest such "
                     "ratio, so the stacked mean is R / M; alpha, bounds and estimates are in R's units")}


def task_rows(result: JobResult) -> list[dict]:
    """Per candidate: {task: {labels_human, risk_on_full_table}} (labels from the label log)."""
    agg, rec = result.data.aggregate, result.data.recovery
    out = []
    for x in result.records:
        log = (result.labels or {}).get(x.name)
        counts = np.zeros(len(agg.parts), dtype=int)
        if log is not None and x.t:
            counts = np.bincount(agg.task_of(log.human_items(x.t)), minlength=len(agg.parts))
        rows = {}
        for i, p in enumerate(agg.parts):
            rows[p.name] = {"labels_human": int(counts[i]),
                            "risk_on_full_table": None if agg.true_risks is None
                            else _round(float(agg.true_risks[i, x.index]))}
            if rec is not None:  # a recovery aggregate: the task's own recovery on its whole table
                part = slice(p.start, p.start + p.items)
                ref = rec.reference[x.index, part].sum()
                rows[p.name]["recovery_on_full_table"] = (None if ref <= 0
                                                          else _round(float(rec.score[x.index, part].sum() / ref)))
        out.append(rows)
    return out
