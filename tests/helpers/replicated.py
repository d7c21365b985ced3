"""Certified selection over a recorded loss table, vectorised over replications.

The statistical core of a selection job without the engine: draw the human- and
judge-labelled items, run every candidate's e-process to its whole budget, apply the
multiple-testing procedure, pick the certified candidate with the smallest objective, for
hundreds of replications at once (the paper reproductions in ``benchmarks/``). With the
job's seed it draws the items the engine draws, which makes it the tests' independent
reference for the engine (a table job with ``scheduling.mode: full`` equals it to the last bit:
``tests/test_cli.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.policies import (
    confidence_interval,
    get_strategy,
    log_evalue_paths,
    scheme_rhos,
    select,
)
from certsel.workers.replay import LossTable, sample_replications
from certsel.policies.procedures import get_procedure


@dataclass(frozen=True)
class SelectionOutcome:
    """Per replication (leading axis) and candidate (second axis) results."""

    candidates: np.ndarray
    objective: np.ndarray
    true_risk: np.ndarray
    max_evalue: np.ndarray  # (reps, K): max_i E_i, the evidence the procedure uses
    levels: np.ndarray  # (reps, K): the level of each candidate's decision, as `certsel run` reports it
    labels_to_certify: np.ndarray  # (reps, K): first i with E_i >= 1/level, 0 if never
    certified: np.ndarray  # (reps, K) after the multiple-testing procedure
    selected: np.ndarray  # (reps,) candidate index, -1 if none certified
    samples: tuple  # (human, judge_labeled, judge_unlabeled) that were used

    @property
    def selected_objective(self) -> np.ndarray:
        """Objective of the selected candidate; NaN where nothing was certified."""
        return np.where(self.selected >= 0, self.objective[np.maximum(self.selected, 0)], np.nan)

    @property
    def selected_risk(self) -> np.ndarray:
        """True risk of the selected candidate; NaN where nothing was certified."""
        return np.where(self.selected >= 0, self.true_risk[np.maximum(self.selected, 0)], np.nan)


def replicated_selection(
    table: LossTable,
    *,
    n: int,
    r: int,
    reps: int = 1,
    seed: int = 0,
    alpha: float = 0.1,
    delta: float = 0.1,
    scheme: str = "r-autoeval+",
    betting: str = "up",
    procedure: str = "fst",
    observation: str = "split",
    **policy_kwargs,
) -> SelectionOutcome:
    """Run the selection ``reps`` times on independent item draws.

    Each replication labels n items with humans and N = r n more with the judge only
    (Algorithm 1's pairing), tests every candidate for R <= alpha at level delta, applies
    ``procedure`` (a registered procedure that takes e-values: 'fst' in the table's order,
    'bonferroni', 'holm', ...) and selects the certified candidate with the smallest
    objective (e.g. average bitwidth). ``observation`` is the jobs' default, ``"split"``, or the
    paper's (:func:`~certsel.policies.autoeval.effective_observations`).
    """
    proc = get_procedure(procedure)
    if not proc.testing:
        raise ValueError(f"procedure {procedure!r} does not take per-candidate e-values")
    if table.objective is None:
        raise ValueError("the loss table has no objective column to select on")
    human, jl, ju = sample_replications(table, reps, n, r * n, seed=seed)
    log_e = log_evalue_paths(
        human, jl, ju, alpha=alpha, delta=delta, rhos=scheme_rhos(scheme), betting=betting, observation=observation,
        **policy_kwargs
    )
    max_log_e = log_e.max(axis=-1)
    # each candidate's threshold as the job's procedure sets it (delta/K under Bonferroni, the
    # step-down levels under Holm): the labels it took to certify are counted against it
    levels = np.stack([proc.decision_deltas(delta, m) for m in max_log_e])
    hit = log_e >= -np.log(levels)[..., None]
    first = np.where(hit.any(axis=-1), hit.argmax(axis=-1) + 1, 0)
    certified = proc.certified(max_log_e, delta)
    return SelectionOutcome(
        candidates=table.candidates,
        objective=table.objective,
        true_risk=table.true_risk,
        max_evalue=np.exp(max_log_e),
        levels=levels,
        labels_to_certify=first,
        certified=certified,
        selected=select(certified, table.objective),
        samples=(human, jl, ju),
    )


def candidate_intervals(outcome: SelectionOutcome, *, delta: float, scheme: str, betting: str, **policy_kwargs):
    """Two-sided anytime-valid (1 - delta) intervals for every candidate of every replication
    (pass the candidates' level, e.g. ``procedure.candidate_deltas(...).min()``, for intervals
    that hold together with the selection's procedure)."""
    human, jl, ju = outcome.samples
    return confidence_interval(human, jl, ju, delta=delta, rhos=scheme_rhos(scheme),
                               betting=get_strategy(betting).interval_strategy(), **policy_kwargs)
