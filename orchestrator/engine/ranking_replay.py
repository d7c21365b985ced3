"""One repetition of a ranking job on its replay table, as the job runs it: what ``certsel audit`` repeats for a
pairwise job (the audit layer cannot import the engine, so the command that runs an audit hands it this function)."""

from __future__ import annotations

from .driver import run_job
from .runtime import LocalRuntime


def replay_ranking(job) -> tuple:
    """``job`` = (config, job data, seed): the ranking the job certifies with that seed (its item order), and each
    model's human labels, in the data's model order. Module level: it runs in the audit's worker processes."""
    cfg, data, seed = job
    res = run_job(cfg.model_copy(update={"seed": int(seed)}), data, LocalRuntime(1), collect_labels=False)
    return res.ranking, [r.n_human for r in res.records]
