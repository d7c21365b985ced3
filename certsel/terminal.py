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
from typing import TYPE_CHECKING

from certsel.orchestrator.outputs.gpu import gpu_line
from certsel.orchestrator.outputs.cells import headline, oracle_line
from certsel.orchestrator.outputs.goals import Column, goal_of

if TYPE_CHECKING:  # the schema imports pydantic: only where a certificate is parsed
    from certsel.orchestrator.outputs.selection_schema import Costs, Selection, TasksSelection

FORMATS = ("table", "json", "csv", "markdown")


def table_parts(cert: Selection):
    """(title, columns, rows, bold) of a job's table, from its goal."""
    return goal_of(cert).table(cert)


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


def _saved(fraction: float) -> str:
    """A saving in words; a ranking whose pairs drew different items can exceed its nominal budget."""
    return f"{fraction:.0%} saved" if fraction >= 0 else f"{-fraction:.0%} over: pairs drew different items"


def cost_line(costs: Costs) -> str:
    """The spend in the user's unit: "cost: 1,432.5 USD (human 1,400, generation 12.5, judge 20) of 7,800 at full budget"."""
    s, u = costs.spent, costs.unit
    parts = ", ".join(f"{k} {getattr(s, k):,.4g}" for k in ("human", "generation", "judge") if getattr(s, k))
    return f"cost: {s.total:,.6g} {u}" + (f" ({parts})" if parts else "") + \
        f" of {costs.full_budget.total:,.6g} {u} at full budget"


TASK_FIELDS = ["candidate", "task", "certified", "selected", "combined_e_value", "threshold", "status", "e_value",
               "upper_bound", "recovery_lower_bound", "level", "estimate", "labels_human", "labels_judge"]


def _format_tasks(cert: TasksSelection, fmt: str) -> str:
    """A multi-task certificate as csv (one row per candidate and task) or markdown."""
    from certsel.orchestrator.outputs.multitask import markdown

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
    from certsel.orchestrator.outputs.multitask import table_rows

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
    goal = goal_of(cert)
    if not quiet:
        render_table(console, *goal.table(cert))
        for line in goal.after_table(cert):
            console.print(line, markup=False)
    for c in cert.candidates:
        if c.status in ("source failed", "worker lost"):
            console.print(f"{c.candidate}: not certified ({c.reason})", markup=False)
    console.print(f"{headline(cert)} — {cert.certificate}", markup=False)
    for line in goal.after_headline(cert):
        console.print(line, markup=False)
    evidence = goal.evidence(cert)
    if evidence is not None:
        console.print(evidence, markup=False)
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
        from certsel.orchestrator.outputs.mlflow_store import ui_link

        uri = tracking["uri"]
        base = uri if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"  # a server is its own UI
        start = "" if base == uri else f"mlflow ui --backend-store-uri {uri}, then "
        console.print(f"MLflow UI: {start}{ui_link(base, tracking['experiment_id'], tracking['run_id'])} (every "
                      f"job, results as columns: {ui_link(base, tracking['experiment_id'])})", markup=False,
                      soft_wrap=True)
