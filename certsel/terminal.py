"""What ``certsel run`` and ``certsel show`` print: a job's certificate as a terminal table
or as JSON, CSV or Markdown (``--format``).

The terminal table never cuts a candidate id: on a narrow terminal it drops secondary
columns (the two-sided interval first, the candidate id never) and, only if the id alone is
wider than the terminal, wraps it. Output to a pipe or a file is never narrowed at all.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from certsel.orchestrator.outputs.gpu import gpu_line
from certsel.orchestrator.outputs.cells import efficiency_cell, headline, judge_cell, oracle_line, rank_text, tie_counts
from certsel.orchestrator.outputs.numbers import bound_text, share_text

if TYPE_CHECKING:  # the schema imports pydantic: only where a certificate is parsed
    from certsel.orchestrator.outputs.selection_schema import Costs, Evidence, Selection, TasksSelection

FORMATS = ("table", "json", "csv", "markdown")


@dataclass(frozen=True)
class Column:
    """A table column: ``keep`` 0 is never dropped; larger values are dropped first when the
    terminal is too narrow."""

    name: str
    keep: int = 0


def _selection_columns(cert: Selection) -> tuple[list[Column], list[list[str]], list[bool]]:
    """The per-candidate table: the simultaneous bound (what the certificate is about) first, then
    the bound of the candidate's own test at its level, the two-sided interval as a secondary
    column; the judge's agreement when there is one."""
    alpha = cert.procedure.alpha
    cands = cert.candidates
    testing = any(c.e_value is not None for c in cands)
    judged = any(c.judge is not None for c in cands)
    recovery = cert.claim is not None
    levels = {c.level for c in cands if c.upper_bound is not None}
    # one name per quantity (docs/glossary.md): these are selection.json's simultaneous_bound and upper_bound
    own = "upper bound" + (f" (level {next(iter(levels)):.3g})" if len(levels) == 1 else " @ level")
    if recovery:  # the same columns, stated as recoveries (shares of the reference's score)
        own = "lower bound" + own[len("upper bound"):]
    # "in set" repeats the status for most procedures: it goes last of the secondary columns
    cols = [Column("candidate"), Column("objective", 2), Column("status"), Column("in set", 1),
            *([Column("e-value / threshold", 3)] if testing else []),
            Column("simultaneous lower bound" if recovery else "simultaneous bound"), Column(own, 4),
            Column("recovery estimate" if recovery else "estimate", 5),
            Column("recovery on table" if recovery else "two-sided interval", 7), Column("human", 1),
            *([Column("to certify / min", 6)] if testing else []), *([Column("judge agrees (kappa)", 6)] if judged else [])]
    tasks = [t.name for t in cert.aggregate.tasks] if cert.aggregate is not None else []
    if tasks:  # an aggregate: the human labels its test drew from each task, after the total
        cols.insert(cols.index(next(c for c in cols if c.name == "human")) + 1, Column("by task: " + " / ".join(tasks), 2))
    rows = []
    for c in cands:
        ci = "" if c.ci is None else f"[{c.ci[0]:.3f}, {bound_text(c.ci[1])}]"
        ub = bound_text(c.upper_bound, alpha)
        joint, est = bound_text(c.simultaneous_bound, alpha), "" if c.estimate is None else f"{c.estimate:.3f}"
        if recovery:
            rec = c.recovery
            ub, joint = share_text(rec.lower_bound), share_text(rec.simultaneous_lower_bound)
            est = "" if rec.estimate is None else f"{rec.estimate:.1%}"
            ci = "" if rec.on_full_table is None else f"{rec.on_full_table:.1%}"
        if ub and len(levels) > 1:
            ub += f" @ {c.level:.3g}"
        row = [c.candidate + (" *" if c.selected else ""), "" if c.objective is None else f"{c.objective:g}",
               c.status, "yes" if c.certified else "no"]
        if testing:
            row.append("" if c.e_value is None else f"{c.e_value:.3g} / {c.threshold:.3g}")
        row += [joint, ub, est, ci, str(c.labels_human)]
        if tasks:
            row.append(" / ".join(str(c.tasks[t].labels_human) for t in tasks))
        if testing:
            row.append(efficiency_cell(c))
        if judged:
            row.append(judge_cell(c.judge))
        rows.append(row)
    return cols, rows, [c.selected for c in cands]


def _ranking_columns(cert: Selection) -> tuple[list[Column], list[list[str]], list[bool]]:
    """A ranking as the partial order it certifies: per model its certified wins and losses."""
    rk = cert.ranking
    eps = rk.epsilon
    cols = [Column("model"), Column("rank (certified)"), Column("better than"), Column("worse than"),
            *([Column(f"tied (< {eps:g})")] if eps is not None else []), Column("possible winner", 1),
            Column("mean loss", 2), Column("items", 1), Column("Copeland (uncertified)", 3)]
    worse = {m: sum(m in b for b in rk.better.values()) for m in rk.order}
    ties = tie_counts(rk)
    by_name = {c.candidate: c for c in cert.candidates}
    rows = []
    for m in rk.order:
        c = by_name[m]
        rows.append([m, rank_text(rk, m), str(len(rk.better[m])), str(worse[m]),
                     *([str(ties[m])] if eps is not None else []),
                     "yes" if m in rk.possible_winners else "",
                     "" if c.estimate is None else f"{c.estimate:.3f}", str(c.labels_human),
                     f"{rk.score[m]:+d}"])
    return cols, rows, [False] * len(rows)


def table_parts(cert: Selection):
    """(title, columns, rows, bold) of a job's table."""
    p = cert.procedure
    if cert.ranking is not None:
        rk = cert.ranking
        title = (f"{cert.job}: {cert.policy.kind} / {p.level} "
                 f"({rk.pairs_certified} of {rk.pairs} pair orders certified)")
        return (title, *_ranking_columns(cert))
    target = cert.claim.words if cert.claim is not None else f"alpha={p.alpha:g}"
    return (f"{cert.job}: {cert.policy.kind} / {p.level}, {target}", *_selection_columns(cert))


def fit_columns(cols: list[Column], rows: list[list[str]], width: int | None) -> list[int]:
    """Indices of the columns to show in ``width`` characters (None: all of them): the
    columns with the largest ``keep`` go first, never one with ``keep`` 0."""
    keep = list(range(len(cols)))
    if width is None:
        return keep
    natural = [max([len(cols[i].name), *(len(r[i]) for r in rows)]) for i in keep]

    def total(idx):  # rich's default box: one space each side of a cell and a rule between columns
        return sum(natural[i] + 3 for i in idx) + 1

    for i in sorted(keep, key=lambda i: -cols[i].keep):
        if total(keep) <= width or cols[i].keep == 0:
            break
        keep.remove(i)
    return keep


def render_table(console, title: str, cols: list[Column], rows: list[list[str]], bold: list[bool]) -> None:
    """The table fitted to a terminal's width, or at its natural width anywhere else."""
    from rich.table import Table

    shown = fit_columns(cols, rows, console.width if console.is_terminal else None)
    t = Table(title=title)
    id_width = max([len(cols[0].name), *(len(r[0]) for r in rows)])
    for i in shown:
        # the id column keeps its width while the others can give way; an id longer than the
        # terminal folds onto the next line rather than being cut
        t.add_column(cols[i].name, justify="left" if i == 0 else "right", overflow="fold",
                     min_width=min(id_width, console.width - 24) if i == 0 else None)
    for r, b in zip(rows, bold, strict=True):
        t.add_row(*(r[i] for i in shown), style="bold" if b else None)
    if not console.is_terminal:  # a pipe or a file: as wide as the table needs
        console.width = max(80, _natural_width(cols, rows, shown))
    console.print(t)
    dropped = [cols[i].name for i in range(len(cols)) if i not in shown]
    if dropped:
        console.print(f"(not shown at this width: {', '.join(dropped)}; --format csv has every column)",
                      markup=False, style="dim")


def _natural_width(cols, rows, shown) -> int:
    return sum(max([len(cols[i].name), *(len(r[i]) for r in rows)]) + 3 for i in shown) + 1


CSV_FIELDS = ("candidate", "objective", "status", "certified", "selected", "e_value", "threshold", "log_e_value",
              "simultaneous_bound", "upper_bound", "level", "estimate", "ci_low", "ci_high", "labels_human",
              "labels_judge", "requests", "certified_at_labels", "labels_minimum_estimate", "risk_on_full_table",
              "cost", "reason")


def candidate_records(cert: Selection) -> list[dict]:
    """One flat dict per candidate (the CSV's rows and ``Result.to_frame()``)."""
    out = []
    for c in cert.candidates:
        row = {k: getattr(c, k) for k in CSV_FIELDS if k not in ("ci_low", "ci_high")}
        row["ci_low"], row["ci_high"] = (None, None) if c.ci is None else tuple(c.ci)
        row = {k: row[k] for k in CSV_FIELDS}
        for task, fig in (c.tasks or {}).items():  # an aggregate: its per-task figures
            row.update({f"{task}_{k}": v for k, v in fig.as_json().items()})
        out.append(row)
    return out


def format_job(cert: Selection | TasksSelection, fmt: str) -> str:
    """The job's certificate as ``json`` (selection.json), ``csv`` (one row per candidate)
    or ``markdown`` (the table and the certificate sentence)."""
    if fmt == "json":
        return json.dumps(cert.as_json(), indent=2, allow_nan=False)
    from certsel.orchestrator.outputs.selection_schema import TasksSelection

    if isinstance(cert, TasksSelection):
        return _format_tasks(cert, fmt)
    if fmt == "csv":
        buf = io.StringIO()
        rows = candidate_records(cert)
        w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        title, cols, rows, _ = table_parts(cert)
        lines = [f"**{title}**", "", "| " + " | ".join(c.name for c in cols) + " |",
                 "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
        lines += ["", f"{headline(cert)} — {cert.certificate}"]
        return "\n".join(lines)
    raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")


BOUNDS_LEGEND = ("simultaneous bound: R <= it for every candidate at once, with probability >= {conf:g} (<= alpha "
                 "exactly for the certified set; blank: no statement). upper bound: the one-sided bound that inverts "
                 "the candidate's own test at the level of its decision; a per-candidate statement, not adjusted for "
                 "the selection. to certify / min: human labels until certified against log(1/level) / KL_inf, the "
                 "fewest any test would need on average, estimated from its own labels (a rough guide). Names: "
                 "docs/glossary.md.")

RECOVERY_LEGEND = ("simultaneous lower bound: on E[score] / E[reference score] for every candidate at once, with "
                   "probability >= {conf:g} (>= {r:g} exactly for the certified set; blank: no statement). lower "
                   "bound: the candidate's own test's bound at the level of its decision (R-Eval on a table: "
                   "inverting its test; otherwise r + 1 - (1 + r) U from its risk bound U). recovery estimate: mean "
                   "score / mean reference score on its labelled items. to certify / min: as for risks, on its "
                   "recovery losses. Names: docs/glossary.md.")


def recovery_evidence_line(ev: Evidence) -> str:
    """The selected candidate's own evidence in a recovery job, one labelled line each."""
    rec = ev.recovery
    lines = [f"  lower bound: recovery >= {share_text(rec.lower_bound)} (its own test, one-sided, at level "
             f"{ev.level:.3g}; not adjusted for the selection)"]
    if ev.e_value is not None:
        lines.append(f"  e-value: {ev.e_value:.3g} (threshold {ev.threshold:.3g})")
    if rec.estimate is not None:
        lines.append(f"  estimate: {rec.estimate:.1%} (mean score / mean reference score over its "
                     f"{rec.labels} labelled items)")
    return "\n".join(["evidence:", *lines])


def _saved(fraction: float) -> str:
    """A saving in words; a ranking whose pairs drew different items can exceed its nominal budget."""
    return f"{fraction:.0%} saved" if fraction >= 0 else f"{-fraction:.0%} over: pairs drew different items"


def cost_line(costs: Costs) -> str:
    """The spend in the user's unit: "cost: 1,432.5 USD (human 1,400, generation 12.5, judge 20) of 7,800 at full budget"."""
    s, u = costs.spent, costs.unit
    parts = ", ".join(f"{k} {getattr(s, k):,.4g}" for k in ("human", "generation", "judge") if getattr(s, k))
    return f"cost: {s.total:,.6g} {u}" + (f" ({parts})" if parts else "") + \
        f" of {costs.full_budget.total:,.6g} {u} at full budget"


def evidence_line(ev: Evidence, alpha: float) -> str:
    """The selected candidate's own evidence, one labelled line per number, each with the
    level it has (the names of docs/glossary.md)."""
    lines = [f"  upper bound: R <= {bound_text(ev.upper_bound, alpha)} (its own test, one-sided, at level "
             f"{ev.level:.3g}; not adjusted for the selection)"]
    if ev.e_value is not None:
        lines.append(f"  e-value: {ev.e_value:.3g} (threshold {ev.threshold:.3g})")
    lines.append(f"  estimate: {ev.estimate:.3f} ({ev.estimate_note})")
    if ev.certified_at_labels:
        lines.append(f"  human labels: certified after {ev.certified_at_labels}, {ev.labels_human} bought"
                     + (f"; any test would need about {ev.labels_minimum_estimate:.0f} on average (estimated "
                        "from its labels)" if ev.labels_minimum_estimate else ""))
    else:
        lines.append(f"  human labels: {ev.labels_human}")
    return "\n".join(["evidence:", *lines])


TASK_FIELDS = ["candidate", "task", "certified", "selected", "combined_e_value", "threshold", "status", "e_value",
               "upper_bound", "recovery_lower_bound", "level", "estimate", "labels_human", "labels_judge"]


def _format_tasks(cert: TasksSelection, fmt: str) -> str:
    """A multi-task certificate as csv (one row per candidate and task) or markdown."""
    from certsel.orchestrator.outputs.tasks import markdown

    if fmt == "markdown":
        return markdown(cert).rstrip("\n")
    if fmt != "csv":
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TASK_FIELDS, lineterminator="\n")
    w.writeheader()
    for c in cert.candidates:
        for task, r in c.tasks.items():
            row = {"candidate": c.candidate, "task": task, "certified": c.certified, "selected": c.selected,
                   "combined_e_value": c.e_value, "threshold": c.threshold,
                   "recovery_lower_bound": None if r.recovery is None else r.recovery.lower_bound,
                   **{k: getattr(r, k) for k in ("status", "e_value", "upper_bound", "level", "estimate",
                                                 "labels_human", "labels_judge")}}
            w.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue().rstrip("\n")


def print_tasks(console, cert: TasksSelection, quiet: bool, tracking=None, output_dir=None) -> None:
    """A multi-task job: a row per candidate with its evidence on every task, then the certificate."""
    from certsel.orchestrator.outputs.tasks import table_rows

    if not quiet:
        head, rows = table_rows(cert)
        cols = [Column(h, 0 if k < 4 else (3 if h.endswith("labels") else 1)) for k, h in enumerate(head)]
        render_table(console, f"{cert.job}: {cert.policy.kind} / {cert.procedure.level}, "
                              f"{len(cert.tasks)} tasks", cols, rows, [c.selected for c in cert.candidates])
        for t in cert.tasks:
            console.print(f"task {t.name}: {t.target}, {len(t.certified_on_its_own)} certified on its own, "
                          f"{t.labels.human} human labels" + (f" (report: {t.output}/report.html)"
                                                                      if t.output else ""), markup=False)
    console.print(f"{headline(cert)} — {cert.certificate}", markup=False)
    lab = cert.labels
    console.print(f"labels over all tasks: {lab.spent.human} human of {lab.full_budget.human}, "
                  f"{lab.spent.judge} judge of {lab.full_budget.judge}", markup=False)
    if output_dir is not None:
        console.print(f"report: {output_dir / 'report.html'}  (selection.json beside it; each task's own report "
                      "is listed above)", markup=False, soft_wrap=True)
    if tracking:
        console.print(f"MLflow run: {tracking['run_id']}  (certsel show {tracking['run_id'][:8]}; the tasks' runs are "
                      "nested under it)", markup=False)


def print_job(console, cert: Selection | TasksSelection, quiet: bool, run_id=None, tracking=None, output_dir=None) -> None:
    """The job's table, its certificate and where its outputs are, for people."""
    from certsel.orchestrator.outputs.selection_schema import TasksSelection

    if isinstance(cert, TasksSelection):
        print_tasks(console, cert, quiet, tracking, output_dir)
        return
    if not quiet:
        render_table(console, *table_parts(cert))
        if cert.ranking is not None:
            console.print("possible winners (no other model is certified better): "
                          + ", ".join(cert.ranking.possible_winners), markup=False)
        else:
            legend = RECOVERY_LEGEND if cert.claim is not None else BOUNDS_LEGEND
            console.print(legend.format(conf=1 - cert.procedure.delta,
                                        r=0 if cert.claim is None else cert.claim.at_least), markup=False)
    for c in cert.candidates:
        if c.status in ("source failed", "worker lost"):
            console.print(f"{c.candidate}: not certified ({c.reason})", markup=False)
    console.print(f"{headline(cert)} — {cert.certificate}", markup=False)
    if cert.aggregate is not None:
        agg = cert.aggregate
        console.print(f"aggregate: one test on the {cert.data.items} stacked items of "
                      f"{len(agg.tasks)} tasks, losses scaled so that their mean is R / M (M = {agg.unit:.4g}; "
                      f"tested at alpha / M = {agg.policy_alpha:.4g})", markup=False)
    ev = cert.evidence
    if ev is not None and ev.recovery is not None:
        console.print(recovery_evidence_line(ev), markup=False)
    elif ev is not None and ev.upper_bound is not None:
        console.print(evidence_line(ev, cert.procedure.alpha), markup=False)
    lab = cert.labels
    console.print("labels: " + ", ".join(
        f"{getattr(lab.spent, k)} {k} of {getattr(lab.full_budget, k)} ({_saved(getattr(lab.saved_fraction, k))})"
        for k in ("human", "judge", "requests") if getattr(lab.full_budget, k)), markup=False)
    if lab.oracle is not None:
        console.print(oracle_line(lab.oracle), markup=False)
    if cert.costs is not None:
        console.print(cost_line(cert.costs), markup=False)
    if cert.gpu is not None:
        console.print(gpu_line(cert.gpu), markup=False)
    if cert.resume is not None:
        r = cert.resume
        console.print(f"resumed from round {r.from_round}: {r.steps_from_snapshots} candidate steps from "
                      f"snapshots, {r.steps_replayed} replayed from the label log, no label bought twice")
    if cert.recovered is not None and cert.recovered.hosts:
        r = cert.recovered
        console.print(f"workers rebuilt after a crash: {r.hosts} ({r.steps_from_snapshots} candidate steps "
                      f"from snapshots, {r.steps_replayed} replayed from the label log)")
    if output_dir is not None:
        console.print(f"report: {output_dir / 'report.html'}  (selection.json and labels.parquet beside it)",
                      markup=False, soft_wrap=True)
    if run_id:
        console.print(f"MLflow run: {run_id}  (certsel show {run_id[:8]})", markup=False)
    if tracking:
        from certsel.orchestrator.outputs.tracking import ui_link

        uri = tracking["uri"]
        base = uri if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"  # a server is its own UI
        start = "" if base == uri else f"mlflow ui --backend-store-uri {uri}, then "
        console.print(f"MLflow UI: {start}{ui_link(base, tracking['experiment_id'], tracking['run_id'])} (every "
                      f"job, results as columns: {ui_link(base, tracking['experiment_id'])})", markup=False,
                      soft_wrap=True)
