"""inspect-ai logs as certsel tables: ``certsel inspect-table LOG_DIR_OR_FILES ... --out TABLE``.

Every log given (an ``.eval`` or ``.json`` file, or every such file in a folder, by name) is one candidate (a model,
or a prompt variant); samples are paired by id:

    candidate   the model (the task when the models are the same; task@model when neither alone tells the logs
                apart), in the order given (``rank``: 0, 1, ... for FST)
    item        the sample id
    score       the sample's score (inspect's value-to-float), mean over its epochs
    loss        1 - score

Nothing is guessed: an unfinished log, a log that stopped samples early (its scored samples are a subset its stop
chose), an unknown scorer, a score not in [0, 1], or logs over different samples are one-line errors.
"""

from __future__ import annotations

import pathlib
from collections import defaultdict

import numpy as np
import pyarrow as pa

from certsel.errors import InputError

from .scores import ScoreReader

_SUFFIXES = (".eval", ".json")


def find_logs(paths) -> list[pathlib.Path]:
    """The log files of ``paths`` (files as given, folders' logs sorted by name)."""
    out = []
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in _SUFFIXES and f.is_file())
            if not found:
                raise InputError(f"{p}: no inspect log (.eval or .json) in this folder")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(f"{p}: no such log file or folder")
    return out


def _read(path: pathlib.Path):
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # a file that is not an inspect log
        raise InputError(f"{path}: not an inspect log ({type(exc).__name__})") from None
    if log.status != "success":
        raise InputError(f"{path}: the run's status is {log.status!r}; only finished runs make a table")
    stopping = log.results.early_stopping if log.results else None
    if stopping is not None and stopping.early_stops:
        raise InputError(f"{path}: {len(stopping.early_stops)} sample runs were stopped early by "
                         f"{stopping.manager!r}, so its scored samples are a subset its stop chose; "
                         "a table needs a run of every sample")
    if not log.samples:
        raise InputError(f"{path}: the log has no samples (run inspect with sample logging on)")
    return log


def _scores(path, log, reader: ScoreReader) -> dict:
    """sample id -> mean score over its epochs."""
    reader = reader.resolve(log.eval.scorers or [])
    values = defaultdict(list)
    for s in log.samples:
        where = f"{path.name}: sample {s.id!r}, epoch {s.epoch}"
        if reader.scorer not in (s.scores or {}):
            raise InputError(f"{where}: no score from scorer {reader.scorer!r}")
        values[s.id].append(reader.value(s.scores[reader.scorer], where))
    return {i: float(np.mean(v)) for i, v in values.items()}


def _names(logs) -> list[str]:
    models = [str(log.eval.model) for _, log in logs]
    tasks = [str(log.eval.task) for _, log in logs]
    for names in (models, tasks, [f"{t}@{m}" for t, m in zip(tasks, models)]):
        if len(set(names)) == len(names):
            return names
    dup = next(n for n in names if names.count(n) > 1)
    raise InputError(f"two logs are both {dup!r} (same task and model); give each candidate one log")


def inspect_table(paths, *, scorer: str | None = None, key: str | None = None) -> tuple[pa.Table, dict]:
    """The loss table of the logs under ``paths`` and what it holds (see the module docstring)."""
    files = find_logs(paths)
    logs = [(f, _read(f)) for f in files]
    names = _names(logs)
    reader = ScoreReader(scorer, key)
    values = {name: _scores(f, log, reader) for name, (f, log) in zip(names, logs)}
    first = names[0]
    items = list(values[first])
    for name in names[1:]:
        if set(values[name]) != set(items):
            lacks = [i for i in items if i not in values[name]]
            extra = [i for i in values[name] if i not in values[first]]
            raise InputError(f"logs {first!r} and {name!r} do not cover the same samples ({name!r} lacks "
                             f"{len(lacks)}, has {len(extra)} more; first: {(lacks or extra)[0]!r})")
    try:
        items = sorted(items)
    except TypeError:  # ids of mixed types: keep the first log's order, as strings
        items = list(items)
    score = np.array([[values[n][i] for i in items] for n in names])
    K, N = score.shape
    item_col = (np.array(items, dtype=np.int64) if all(isinstance(i, int) for i in items)
                else np.array([str(i) for i in items]))
    cols = {"candidate": np.repeat(names, N), "item": np.tile(item_col, K), "rank": np.repeat(np.arange(K), N),
            "score": score.ravel(), "loss": 1.0 - score.ravel()}
    scorer_name = reader.resolve(logs[0][1].eval.scorers or []).words
    info = {"logs": [str(f) for f in files], "candidates": names, "samples": N, "scorer": scorer_name,
            "epochs": sorted({int(log.eval.config.epochs or 1) for _, log in logs})}
    return pa.table(cols), info
