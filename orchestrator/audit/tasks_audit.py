"""``certsel audit`` of a multi-task job: does the intersection-union certificate keep delta?

Each task's policy is repeated on its own table. Each repetition draws one seed and runs every task with it, so the
audit keeps the coupling of the tasks' item orders in a job (tables of the same size are labelled in the same
order). A candidate's evidence is the smallest of its tasks' max log e-values
(:func:`~certsel.orchestrator.results.task_combination.intersection_union`), and the procedure runs on it. A candidate is a
null when it misses at least one task's target on that task's whole table; the family-wise failure is a repetition
whose certified set holds a null.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.config import RunConfig
from certsel.errors import InputError
from certsel.policies.kinds import Replication

from .base import failure_cells, overall_cells
from .job_audit import betting_repetitions
from .stratified import stratified_repetitions


@dataclass
class TasksAudit:
    cfg: RunConfig
    reps: int
    tasks: list[str]
    rows: list  # per candidate
    overall: dict

    def table(self) -> str:
        head = ["candidate", *[f"{t}: true R / alpha" for t in self.tasks], "null (misses a task)", "level",
                "certified", "99% CP upper", "verdict"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            cells = [r["candidate"], *[f"{x:.4f} / {a:g}" for x, a in zip(r["true_risks"], r["alphas"], strict=True)],
                     "yes" if r["h0"] else "no", f"{r['level']:.4g}", f"{r['certified_rate']:.3f}",
                     "-" if r["failure_upper"] is None else f"{r['failure_upper']:.3f}", r["verdict"] or "-"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def summary(self) -> str:
        ov = self.overall
        return (f"{len(self.tasks)} tasks ({', '.join(self.tasks)}), {self.cfg.policy.kind}, {self.cfg.procedure}, "
                f"delta = {self.cfg.delta:g}, {self.reps} repetitions: family-wise failure {ov['familywise_failure']:.4f} "
                f"(99% CP upper {ov['failure_upper']:.4f}); {str(ov['verdict']).upper()}")


def task_repetitions(cfg: RunConfig, data, seeds: np.ndarray, progress=None) -> np.ndarray:
    """max log E (reps, K) of one task's policy on its table, repetition i as its job runs with seed ``seeds[i]``."""
    table, kind, reps = data.table, cfg.policy.policy_kind, len(seeds)
    if kind.replication is Replication.STRATIFIED:
        return stratified_repetitions(cfg, table, table.true_risk, reps, None, progress, 1, seeds=seeds)[0]
    if kind.replication is Replication.BETTING:
        return betting_repetitions(cfg, table, table.true_risk, reps, None, progress, seeds=seeds)[0]
    raise InputError(f"certsel audit: no repetitions for policy.kind {kind.name!r} in a multi-task job")


def audit_tasks(cfg: RunConfig, cfgs: list[RunConfig], datas: list, *, reps: int = 1000, seed: int = 0,
                progress=None) -> TasksAudit:
    """Repeat the multi-task job ``reps`` times (module docstring)."""
    if reps < 10:
        raise ValueError(f"--reps must be at least 10, got {reps}")
    names = datas[0].names
    seeds = np.random.default_rng(seed).integers(2**31, size=reps)  # one job seed per repetition, for every task
    log_e, truths, alphas = [], [], []
    for tc, d in zip(cfgs, datas, strict=True):
        pos = [d.names.index(n) for n in names]  # the first task's candidate order
        log_e.append(task_repetitions(tc, d, seeds, progress)[:, pos])
        truths.append(d.table.true_risk[pos])
        alphas.append(tc.alpha)
    proc = cfg.proc
    combined = np.min(log_e, axis=0)  # (reps, K)
    fam = proc.certified(np.minimum(combined, 700), cfg.delta)
    truths = np.array(truths)  # (tasks, K)
    bad = (truths > np.array(alphas)[:, None]).any(axis=0)
    levels = proc.candidate_deltas(cfg.delta, len(names))
    own = combined >= -np.log(levels)  # each candidate's combined test at its own level
    rows = []
    for k, name in enumerate(names):
        cells = failure_cells(int(own[:, k].sum()), reps, levels[k]) if bad[k] else \
            {"failure": None, "failure_upper": None, "failure_lower": None, "verdict": None, "level": float(levels[k])}
        rows.append({"candidate": name, "true_risks": truths[:, k].tolist(), "alphas": alphas, "h0": bool(bad[k]),
                     "certified_rate": float(fam[:, k].mean()), **cells})
    fails = int((fam & bad[None, :]).any(axis=1).sum())
    overall = {"procedure": cfg.procedure, **overall_cells(fails, reps, cfg.delta, rows),
               "mean_certified": float(fam.sum(axis=1).mean())}
    return TasksAudit(cfg, reps, [t.name for t in cfg.tasks], rows, overall)
