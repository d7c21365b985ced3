"""lm-evaluation-harness runs as certsel tables: ``certsel lm-eval-table``.

``lm_eval ... --log_samples --output_path DIR`` writes, per model, ``samples_TASK_DATE.jsonl`` (one line per document
and filter: ``doc_id``, ``filter`` and the value of every metric of the task) and ``results_DATE.json`` (which metrics
are higher-is-better). This module pairs the runs of several models on one task by ``doc_id`` into the loss table
certsel reads:

    candidate   the run's name (as given), in the order given (``rank``: 0, 1, ... for FST)
    item        the document id
    score       the metric, oriented so that higher is better, in [0, 1]
    loss        1 - score
    score_reference, loss_drop
                with a reference run: its score on the same document, and the drop
                max(score_reference - score, 0) (a recovery job reads score and score_reference)

Nothing is guessed: a task, metric or filter that is not in a run, a metric outside [0, 1] or without a direction, runs
that do not cover the same documents, or a document logged twice are one-line errors.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d.:-]+)\.jsonl$")


@dataclass(frozen=True)
class TaskLog:
    """One run's log of one task: its per-document metric values and their direction."""

    run: str
    task: str
    samples: pathlib.Path
    higher_is_better: dict  # metric -> bool, from the run's results file


def find_logs(run: str, folder) -> dict[str, TaskLog]:
    """Every task logged under ``folder`` (searched recursively; the newest file per task)."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f"run {run!r}: {folder} is not a folder (give lm_eval's --output_path)")
    newest: dict[str, pathlib.Path] = {}
    for path in sorted(folder.rglob("samples_*.jsonl")):
        m = _SAMPLES.match(path.name)
        if m and (m["task"] not in newest or path.name > newest[m["task"]].name):
            newest[m["task"]] = path
    if not newest:
        raise ValueError(f"run {run!r}: no samples_TASK_DATE.jsonl under {folder} (run lm_eval with --log_samples)")
    out = {}
    for task, path in newest.items():
        direction = {}
        for res in sorted(path.parent.glob("results_*.json")):
            direction.update(json.loads(res.read_text()).get("higher_is_better", {}).get(task, {}))
        out[task] = TaskLog(run, task, path, direction)
    return out


def _values(log: TaskLog, metric: str, flt: str | None) -> tuple[dict[int, float], str]:
    """doc_id -> metric value of one run (one filter), and the filter used."""
    rows = []
    for n, line in enumerate(log.samples.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise ValueError(f"{log.samples}: line {n} is not valid JSON") from None
    filters = sorted({str(r.get("filter", "none")) for r in rows})
    if flt is None:
        if len(filters) > 1:
            raise ValueError(f"run {log.run!r}, task {log.task!r}: several filters ({', '.join(filters)}); "
                             "choose one with --filter")
        flt = filters[0]
    elif flt not in filters:
        raise ValueError(f"run {log.run!r}, task {log.task!r}: no filter {flt!r} (has {', '.join(filters)})")
    out: dict[int, float] = {}
    for r in rows:
        if str(r.get("filter", "none")) != flt:
            continue
        if metric not in r:
            raise ValueError(f"run {log.run!r}, task {log.task!r}: doc {r.get('doc_id')} has no metric {metric!r}")
        doc = int(r["doc_id"])
        if doc in out:
            raise ValueError(f"run {log.run!r}, task {log.task!r}: doc_id {doc} is logged twice (filter {flt!r})")
        v = r[metric]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise ValueError(f"run {log.run!r}, task {log.task!r}: metric {metric!r} of doc {doc} is {v!r}, "
                             "not a number (certsel needs a per-document score in [0, 1])")
        out[doc] = float(v)
    return out, flt


def _metric(logs: list[TaskLog], metric: str | None) -> tuple[str, bool]:
    """The metric (the task's only one when not given) and whether higher is better."""
    first = logs[0]
    have = first.higher_is_better
    if metric is None:
        if len(have) != 1:
            raise ValueError(f"task {first.task!r} has metrics {', '.join(sorted(have)) or '(none recorded)'}: "
                             "choose one with --metric")
        metric = next(iter(have))
    for log in logs:
        if metric not in log.higher_is_better:
            raise ValueError(f"run {log.run!r}: task {log.task!r} has no metric {metric!r} with a direction in its "
                             f"results file (has {', '.join(sorted(log.higher_is_better)) or 'none'})")
    directions = {log.higher_is_better[metric] for log in logs}
    if len(directions) != 1 or not isinstance(next(iter(directions)), bool):
        raise ValueError(f"task {first.task!r}: metric {metric!r} is not marked higher- or lower-is-better "
                         "consistently in the runs' results files")
    return metric, directions.pop()


def lm_eval_table(runs: dict[str, str | pathlib.Path], task: str, *, metric: str | None = None,
                  flt: str | None = None, reference: str | None = None) -> tuple[pa.Table, dict]:
    """The loss table of ``task`` over ``runs`` (name -> lm_eval output folder), and what it holds (metric, direction,
    filter, documents); see the module docstring."""
    if len(runs) < 1:
        raise ValueError("give at least one run (--run NAME=FOLDER)")
    if reference is not None and reference not in runs:
        raise ValueError(f"--reference {reference!r} is not one of the runs ({', '.join(runs)})")
    logs = []
    for name, folder in runs.items():
        found = find_logs(name, folder)
        if task not in found:
            raise ValueError(f"run {name!r}: no task {task!r} in its logs (has {', '.join(sorted(found))})")
        logs.append(found[task])
    metric, higher = _metric(logs, metric)
    values, used = {}, None
    for log in logs:
        values[log.run], used = _values(log, metric, flt if flt is not None else used)
    docs = sorted(values[logs[0].run])
    for name, v in values.items():
        if set(v) != set(docs):
            lacks, extra = sorted(set(docs) - set(v)), sorted(set(v) - set(docs))
            raise ValueError(f"task {task!r}: runs {logs[0].run!r} and {name!r} do not cover the same documents "
                             f"({name!r} lacks {len(lacks)}{': ' + ', '.join(map(str, lacks[:5])) if lacks else ''}; "
                             f"has {len(extra)} more{': ' + ', '.join(map(str, extra[:5])) if extra else ''})")
    score = np.array([[values[name][d] for d in docs] for name in runs])
    if score.min() < 0.0 or score.max() > 1.0:
        k = int(np.argmax((score < 0) | (score > 1)) // len(docs))
        raise ValueError(f"task {task!r}: metric {metric!r} has values outside [0, 1] (run {list(runs)[k]!r}: "
                         f"min {score[k].min():.6g}, max {score[k].max():.6g}); certsel needs per-document scores "
                         "in [0, 1]")
    if not higher:
        score = 1.0 - score
    K, N = score.shape
    cols = {"candidate": np.repeat(list(runs), N), "item": np.tile(np.array(docs, dtype=np.int64), K),
            "rank": np.repeat(np.arange(K), N), "score": score.ravel(), "loss": 1.0 - score.ravel()}
    if reference is not None:
        ref = np.tile(score[list(runs).index(reference)], K)
        cols["score_reference"] = ref
        cols["loss_drop"] = np.maximum(ref - score.ravel(), 0.0)
    info = {"task": task, "metric": metric, "higher_is_better": higher, "filter": used, "documents": N,
            "runs": list(runs), "reference": reference}
    return pa.table(cols), info
