"""What ``certsel run`` and ``certsel show`` print: a job's certificate as a terminal table or as JSON, CSV or Markdown
(``--format``).

The table never cuts a candidate id: on a narrow terminal it drops secondary columns (the two-sided interval first, the
id never) and wraps an id only if it alone is wider than the terminal. Output to a pipe or a file is never narrowed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pathlib
import shutil
import sys
import textwrap
from typing import TYPE_CHECKING

from certsel.orchestrator.outputs.goals import Column, goal_of

if TYPE_CHECKING:  # the schema imports pydantic: only where a certificate is parsed
    from certsel.orchestrator.outputs.selection_schema import Certificate
    from certsel.orchestrator.outputs.tasks_schema import TasksCertificate

FORMATS = ("table", "json", "csv", "markdown")
# the width of a table printed to a pipe or a file (CI logs, a saved report): $COLUMNS when set; the columns that do
# not fit are named under it, and --format csv has every column
PIPED_WIDTH = 100


def piped_width() -> int:
    """The width of output to a pipe or a file: $COLUMNS when set, else :data:`PIPED_WIDTH`."""
    return int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else PIPED_WIDTH


def prose_width(stream=None) -> int:
    """The columns a line of prose is folded to: a terminal's own (which $COLUMNS overrides), else
    :func:`piped_width`."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if isatty is not None and isatty() else piped_width()


def folded(text: str, width: int | None = None) -> str:
    """``text`` folded at spaces to ``width`` columns (:func:`prose_width` by default), its continuation lines indented
    two spaces. A word wider than that (a path, a URL, a command) stays whole on a line of its own: folding never
    breaks what a reader copies."""
    return textwrap.fill(text, width or prose_width(), subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def short_path(path) -> str:
    """``path`` as a person reads it: relative to the current folder when inside it, with ``~`` for the home folder
    when inside that, else as it is."""
    p = pathlib.Path(path)
    try:
        return str(p.resolve().relative_to(pathlib.Path.cwd().resolve()))
    except (ValueError, OSError):
        pass
    try:
        return "~/" + str(p.resolve().relative_to(pathlib.Path.home().resolve()))
    except (ValueError, OSError, RuntimeError):
        return str(p)


def fit_columns(cols: list[Column], rows: list[list[str]], width: int | None) -> list[int]:
    """Indices of the columns to show in ``width`` characters (None: all): largest ``keep`` dropped first, 0 never."""
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
    """The table fitted to a terminal's width, or to $COLUMNS (default :data:`PIPED_WIDTH`) anywhere else."""
    from rich.table import Table

    piped = piped_width()
    shown = fit_columns(cols, rows, console.width if console.is_terminal else piped)
    t = Table(title=title)
    id_width = max([len(cols[0].name), *(len(r[0]) for r in rows)])
    for i in shown:
        # the id column keeps its width while the others give way; one wider than the terminal folds, never cut
        t.add_column(cols[i].name, justify="left" if i == 0 else "right", overflow="fold",
                     min_width=min(id_width, console.width - 24) if i == 0 else None)
    for r, b in zip(rows, bold, strict=True):
        t.add_row(*(r[i] for i in shown), style="bold" if b else None)
    if not console.is_terminal:  # a pipe or a file: as wide as the columns kept need
        console.width = max(80, _natural_width(cols, rows, shown))
    console.print(t)
    dropped = [cols[i].name for i in range(len(cols)) if i not in shown]
    if dropped:
        console.print(f"(not shown at this width: {', '.join(dropped)}; --format csv has every column)",
                      markup=False, style="dim")


def _natural_width(cols, rows, shown) -> int:
    return sum(max([len(cols[i].name), *(len(r[i]) for r in rows)]) + 3 for i in shown) + 1


def format_job(cert: Certificate | TasksCertificate, fmt: str) -> str:
    """The job's certificate as ``json`` (selection.json), ``csv`` (one row per candidate, or per
    candidate and task) or ``markdown`` (the table and the certificate sentence), as its goal lays them out."""
    if fmt == "json":
        return json.dumps(cert.as_json(), indent=2, allow_nan=False)
    goal = goal_of(cert)
    if fmt == "csv":
        fields, rows = goal.csv_rows(cert)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        return goal.markdown(cert)
    raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def print_job(console, cert: Certificate | TasksCertificate, quiet: bool, run_id=None, tracking=None, output_dir=None) -> None:
    """The job's table, its certificate and where its outputs are, for people: the goal's parts."""
    goal = goal_of(cert)
    if not quiet:
        render_table(console, *goal.table(cert))
        for line in goal.after_table(cert):
            console.print(line, markup=False)
    for line in [*goal.failures(cert), f"{goal.headline(cert)} — {cert.certificate}", *goal.after_headline(cert),
                 goal.evidence(cert), *goal.spend_lines(cert)]:
        if line is not None:
            console.print(line, markup=False)
    if output_dir is not None:
        console.print(f"report: {output_dir / 'report.html'}  ({goal.beside_report})", markup=False, soft_wrap=True)
    if run_id:
        console.print(f"MLflow run: {run_id}  (certsel show {run_id[:8]})", markup=False)
    if tracking:
        from certsel.orchestrator.outputs.mlflow_store import ui_link

        uri = tracking["uri"]
        base = uri if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"  # a server is its own UI
        start = "" if base == uri else f"mlflow ui --backend-store-uri {uri}, then "
        console.print(f"MLflow UI: {start}{ui_link(base, tracking['experiment_id'], tracking['run_id'])} (every "
                      f"job, results as columns: {ui_link(base, tracking['experiment_id'])}){goal.runs_note}",
                      markup=False, soft_wrap=True)
