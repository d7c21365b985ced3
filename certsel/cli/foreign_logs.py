"""``certsel lm-eval-table`` and ``certsel inspect-table``: other tools' logs as certsel tables."""

from __future__ import annotations

import json
import pathlib


def lm_eval_table_command(args) -> int:
    """``certsel lm-eval-table``: lm-eval runs of several models on one task as a loss table."""
    from certsel.orchestrator.inputs.lm_eval_logs import lm_eval_table
    from certsel.workers.tables import table_format

    runs = {}
    for item in args.run:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"--run {item!r} is not NAME=FOLDER")
        if name in runs:
            raise ValueError(f"--run: the name {name!r} is given twice")
        runs[name] = folder
    fmt = table_format(args.out)  # an unknown suffix fails before anything is read
    table, info = lm_eval_table(runs, args.task, metric=args.metric, flt=args.filter, reference=args.reference)
    write_table(table, args.out, fmt)
    way = "higher is better" if info["higher_is_better"] else "lower is better: score = 1 - metric"
    print(f"wrote {args.out}: {len(info['runs'])} runs x {info['documents']} documents of {info['task']!r}, metric "
          f"{info['metric']!r} ({way}), filter {info['filter']!r}")
    recovery = None
    if info["reference"] is not None:
        recovery = (f"# or certify recovery against {info['reference']}: data: {{path: {args.out.name}, score: score, "
                    f"reference: score_reference, order: rank}}, recovery: {{at_least: 0.95, reference_name: "
                    f"{info['reference']}}}")
    suggest_job(args.out, info["documents"], recovery)
    return 0


def suggest_job(table: pathlib.Path, items: int, comment: str | None = None) -> None:
    """Write a job for a table just written (``NAME.job.yaml`` beside it) and print the command that runs it: a fixed
    sequence in the table's order, R-Eval (no judge), every item as the budget. A job file already there is kept."""
    job = table.with_name(table.name.split(".")[0] + ".job.yaml")
    if job.exists():
        print(f"certify with: certsel run {job}  (the job file already there, kept as it is)")
        return
    lines = [f"# certsel's suggestion for {table.name}: edit alpha (the risk, 1 - the mean score you need)",
             *([comment] if comment else []),
             f"name: {table.name.split('.')[0]}", f"data: {{path: {table.name}, human: loss, order: rank}}",
             "policy: {kind: r-eval}", "alpha: 0.2", "delta: 0.05", "procedure: fst", f"budget: {{n: {items}}}"]
    job.write_text("\n".join(lines) + "\n")
    print(f"certify with: certsel run {job}  (a fixed sequence in rank order at alpha 0.2: edit it to your claim)")


def write_table(table, out: pathlib.Path, fmt: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "Parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif fmt in ("CSV", "TSV"):
        from pyarrow import csv

        csv.write_csv(table, out, csv.WriteOptions(delimiter="\t" if fmt == "TSV" else ","))
    else:
        out.write_text("\n".join(json.dumps(r) for r in table.to_pylist()) + "\n")


def inspect_table_command(args) -> int:
    """``certsel inspect-table``: inspect-ai logs of several models or prompts as a loss table."""
    from certsel.inspect.logs import inspect_table
    from certsel.workers.tables import table_format

    fmt = table_format(args.out)  # an unknown suffix fails before anything is read
    table, info = inspect_table(args.logs, scorer=args.scorer, key=args.key)
    write_table(table, args.out, fmt)
    print(f"wrote {args.out}: {len(info['candidates'])} candidates ({', '.join(info['candidates'])}) x "
          f"{info['samples']} samples, {info['scorer']}, score = mean over epochs {info['epochs']}")
    suggest_job(args.out, info["samples"])
    return 0
