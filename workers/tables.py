"""Reading users' tables: Parquet, CSV/TSV, JSON Lines, or a table already in memory.

Every table certsel reads (loss tables, item features, items files) goes through :func:`read_table`, so that the formats
and the error messages are the same everywhere. The format follows the file's suffix; a file that cannot be read is one
error naming the file, the format tried and pyarrow's first line, never a silent fallback to another format. In memory,
anything ``pyarrow.table`` accepts works: a ``pyarrow.Table``, a pandas or polars DataFrame, a dict of columns.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa

from certsel.errors import first_line

# suffix -> (format name, reader); readers are imported when used (pyarrow.csv/json are cheap,
# but a Parquet-only user never needs them)
FORMATS = {
    ".parquet": "Parquet", ".pq": "Parquet",
    ".csv": "CSV", ".tsv": "TSV",
    ".jsonl": "JSON Lines", ".ndjson": "JSON Lines", ".json": "JSON Lines",
}


def table_format(path) -> str:
    """The format of a table file from its suffix; an unknown suffix is an error naming the known ones."""
    suffix = pathlib.Path(path).suffix.lower()
    try:
        return FORMATS[suffix]
    except KeyError:
        known = ", ".join(dict.fromkeys(FORMATS))
        raise ValueError(f"{path}: unknown table format {suffix or '(no suffix)'!r} (use one of {known})") from None


def _read_file(path: pathlib.Path, fmt: str) -> pa.Table:
    if fmt == "Parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if fmt in ("CSV", "TSV"):
        from pyarrow import csv

        return csv.read_csv(path, parse_options=csv.ParseOptions(delimiter="\t" if fmt == "TSV" else ","))
    from pyarrow import json

    return json.read_json(path)


def read_table(source, what: str = "table") -> pa.Table:
    """``source`` as a ``pyarrow.Table``: a path (Parquet, CSV, TSV, JSON Lines by suffix) or a table in memory. Raises
    ``ValueError`` naming the file and the format on failure."""
    if isinstance(source, (str, pathlib.Path)):
        path = pathlib.Path(source)
        fmt = table_format(path)
        if not path.is_file():
            raise ValueError(f"{what} not found: {path}")
        try:
            table = _read_file(path, fmt)
        except Exception as exc:  # pyarrow raises several types for unreadable input
            hint = " (one object per line, not a JSON array)" if fmt == "JSON Lines" else ""
            raise ValueError(f"{path}: not a readable {fmt} file{hint} "
                             f"({exc.__class__.__name__}: {first_line(exc, limit=120)})") from None
        return table
    if isinstance(source, pa.Table):
        return source
    try:
        return pa.table(source)
    except Exception as exc:
        raise ValueError(f"{what}: expected a file path or a table (pyarrow, pandas, polars, a dict of columns), "
                         f"got {type(source).__name__} ({first_line(exc, limit=120)})") from None


def id_column(values: np.ndarray, name: str, where) -> np.ndarray:
    """An item-id column as integers or strings; floats (``1.0``), booleans and missing ids are errors, since an id must
    match exactly across tables. A string column whose every id is a decimal integer as ``str(int)`` writes it is read
    as integers: the ids ``7`` and ``"7"`` are one item, so a table written again with its ids as strings (or a CSV
    round trip) holds the same items in the same order, and its claims stay the same claims (workers/claims.py)."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    if values.dtype.kind in "OUS":
        if any(v is None for v in values):
            raise ValueError(f"{where}: column {name!r} has missing item ids")
        ids = values.astype(str)
        try:  # integers written as str(int) writes them ("7", "-3"; not "007", "+7", " 7", "-0" or "7.0")
            ints = ids.astype(np.int64)
        except (ValueError, OverflowError):
            return ids
        return ints if ids.size and np.array_equal(ints.astype(str), ids) else ids
    raise ValueError(f"{where}: column {name!r} must hold integer or string item ids, got {values.dtype}")


def match_items(have: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Positions in ``have`` (sorted, unique ids) of every id in ``want``, -1 where missing. Integer and string ids
    never match each other silently: a string table and an integer features file are compared as strings, so ``7`` and
    ``"7"`` agree and ``"007"`` does not."""
    if have.dtype.kind != want.dtype.kind:
        have, want = have.astype(str), want.astype(str)
        order = np.argsort(have)
        have_sorted = have[order]
    else:
        order = np.arange(have.size)
        have_sorted = have
    if have_sorted.size == 0:
        return np.full(want.size, -1)
    pos = np.minimum(np.searchsorted(have_sorted, want), have_sorted.size - 1)
    found = have_sorted[pos] == want
    return np.where(found, order[pos], -1)
