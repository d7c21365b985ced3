"""Replay label source: recorded loss tables and the paper's resampling protocol.

A loss table has one row per (candidate, item) with the candidate's loss against the human reference and against one or
more judges (any format of :mod:`~certsel.workers.tables`; item ids integers or strings). It becomes dense (candidates x
items) matrices after validation: every candidate covers the same items exactly once, losses are finite and inside the
declared bounds; a bad table raises ``ValueError`` naming the problem.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np

from .tables import id_column, match_items, read_table

# The bundled real table; present in a source checkout (the README quickstart runs from one).
DEFAULT_TABLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" / "triviaqa_llama31_8b_mx.parquet"


@dataclass(frozen=True)
class LossTable:
    """Dense view of a loss table: ``human``/``judge`` are (candidates, items) in ``candidates`` order; ``order``
    (fixed-sequence rank) and ``objective`` columns when present."""

    candidates: np.ndarray
    items: np.ndarray
    human: np.ndarray
    judge: np.ndarray | None
    order: np.ndarray | None
    objective: np.ndarray | None
    judge_column: str | None

    @property
    def true_risk(self) -> np.ndarray:
        """Mean human loss over all items: the risk R of each candidate on this population."""
        return self.human.mean(axis=1)


def _column(table, name: str, path) -> np.ndarray:
    if name not in table.column_names:
        raise ValueError(f"{path}: missing column {name!r} (has {', '.join(table.column_names)})")
    return table.column(name).to_numpy(zero_copy_only=False)


def _rows_named(bad: np.ndarray, where=None, shown: int = 3) -> str:
    """The first few offending rows (0-based, as pandas counts), each with ``where(row)``, and how many."""
    rows = np.flatnonzero(bad)
    parts = [f"row {r}" + ("" if where is None else f" ({where(r)})") for r in rows[:shown]]
    return ", ".join(parts) + (f" and {rows.size - shown} more" if rows.size > shown else "")


def _numeric(values: np.ndarray, name: str, path, where=None) -> np.ndarray:
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"{path}: column {name!r} must be numeric, got {values.dtype}")
    v = values.astype(np.float64)
    if not np.all(np.isfinite(v)):
        bad = ~np.isfinite(v)
        raise ValueError(f"{path}: column {name!r} has {int(np.sum(bad))} NaN/inf value(s): {_rows_named(bad, where)}")
    return v


def _encoded(table, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A column's distinct values and each row's index into them, hashed by pyarrow (``dictionary_encode``), or None
    where pyarrow cannot (a missing value, a type it does not hash): only the distinct values then reach numpy, so a long
    table's load is not spent sorting every row's string or id."""
    import pyarrow as pa

    col = table.column(name)
    if col.null_count or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
                              or pa.types.is_integer(col.type)):
        return None
    enc = col.combine_chunks().dictionary_encode()
    values = enc.dictionary.to_numpy(zero_copy_only=False)
    return (values.astype(str) if values.dtype.kind == "O" else values), enc.indices.to_numpy()


def _sorted_codes(distinct: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values sorted and each row's index into the sorted ones: ``np.unique(values, return_inverse=True)``."""
    order = np.argsort(distinct, kind="stable")
    rank = np.empty(order.size, dtype=np.intp)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[index]


def _candidates(table, name: str, path) -> tuple[np.ndarray, np.ndarray]:
    """The candidate names, sorted, and each row's index into them."""
    enc = _encoded(table, name) if name in table.column_names else None
    if enc is not None:
        return _sorted_codes(enc[0].astype(str), enc[1])
    return np.unique(_column(table, name, path).astype(str), return_inverse=True)


def _items(table, name: str, path) -> tuple[np.ndarray, np.ndarray]:
    """The item ids, sorted, and each row's index into them; ids normalised by :func:`id_column` (checked on the
    distinct ids, which is the same check: a string id is an integer exactly when every row holding it is)."""
    enc = _encoded(table, name) if name in table.column_names else None
    if enc is not None:
        return _sorted_codes(id_column(enc[0], name, path), enc[1])
    return np.unique(id_column(_column(table, name, path), name, path), return_inverse=True)


def _repeated(flat: np.ndarray, cells: int) -> np.ndarray:
    """Rows whose (candidate, item) cell an earlier row already holds."""
    if cells <= 4 * flat.size:  # a count per cell is cheap when the table is about as large as its cells
        if np.bincount(flat, minlength=cells).max(initial=0) <= 1:
            return np.zeros(flat.size, bool)
    _, first = np.unique(flat, return_index=True)
    again = np.ones(flat.size, bool)
    again[first] = False
    return again


def load_loss_table(
    source=DEFAULT_TABLE,
    *,
    human: str = "loss_human",
    judge: str | None = "loss_judge_best",
    candidate: str = "candidate",
    item: str = "item",
    order: str | None = "rank",
    objective: str | None = "avg_bitwidth",
    loss_bounds=(0.0, 1.0),
    name: str | None = None,
) -> LossTable:
    """Read and validate a loss table (a path or a table in memory); see the module docstring for the checks. Errors
    name ``name``, else the path, else "the loss table"."""
    table = read_table(source, "loss table")
    path = name or (source if isinstance(source, (str, pathlib.Path)) else "the loss table")
    if table.num_rows == 0:
        raise ValueError(f"{path}: the table has no rows")
    names, cidx = _candidates(table, candidate, path)
    cand = names[cidx]  # what the rows say (for the error lines)
    item_ids, iidx = _items(table, item, path)
    items = item_ids[iidx]  # what the rows say
    K, I = names.size, item_ids.size
    flat = cidx * I + iidx
    again = _repeated(flat, K * I)
    if again.any():
        raise ValueError(f"{path}: duplicated ({candidate}, {item}) rows: "
                         f"{_rows_named(again, lambda r: f'{cand[r]}, {items[r]}')}")
    if flat.size != K * I:
        per = np.bincount(cidx, minlength=K)
        short = [f"{names[k]} ({per[k]})" for k in np.flatnonzero(per < I)[:3]]
        more = int(np.sum(per < I)) - len(short)
        raise ValueError(f"{path}: candidates do not all cover the same {I} items ({flat.size} rows for {K} candidates; "
                         f"items per candidate: {', '.join(short)}" + (f" and {more} more" if more > 0 else "") + ")")
    lo, hi = loss_bounds

    def where(r: int) -> str:  # a row of the table as a user finds it: its candidate and item
        return f"{candidate} {cand[r]}, {item} {items[r]}"

    def dense(col: str) -> np.ndarray:
        v = _numeric(_column(table, col, path), col, path, where)
        if v.min() < lo or v.max() > hi:
            bad = (v < lo) | (v > hi)
            raise ValueError(f"{path}: column {col!r} has values outside [{lo}, {hi}] ({int(bad.sum())} of them; min "
                             f"{v.min():.6g}, max {v.max():.6g}): {_rows_named(bad, lambda r: f'{where(r)}: {v[r]:.6g}')}")
        out = np.empty(K * I)
        out[flat] = v
        return out.reshape(K, I)

    def per_candidate(col: str | None) -> np.ndarray | None:
        if col is None or col not in table.column_names:
            return None
        v = _numeric(_column(table, col, path), col, path)
        first = np.zeros(K)
        first[cidx] = v
        if not np.allclose(first[cidx], v):
            raise ValueError(f"{path}: column {col!r} must be constant within each candidate")
        return first

    rank = per_candidate(order)
    perm = np.argsort(rank, kind="stable") if rank is not None else np.arange(K)
    h = dense(human)[perm]
    j = dense(judge)[perm] if judge is not None else None
    obj = per_candidate(objective)
    return LossTable(
        candidates=names[perm],
        items=item_ids,
        human=h,
        judge=j,
        order=None if rank is None else rank[perm],
        objective=None if obj is None else obj[perm],
        judge_column=judge,
    )


def item_order(n_items: int, seed, reps: int | None = None) -> np.ndarray:
    """The seeded random order in which items are labelled: a permutation of ``0..n_items-1`` (or ``reps`` of them,
    shape (reps, n_items)), shared by the replay source and :func:`sample_replications` so that a job and its in-process
    reproduction see the same items."""
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((1 if reps is None else reps, n_items)), axis=1)
    return perm[0] if reps is None else perm


# the judge-only items' own order under sampling without replacement: a stream of the job seed
JUDGE_ORDER_STREAM = 0x4A0D


def label_orders(n_items: int, seed, n: int, r: int, without_replacement: bool = False):
    """(human items (n,), judge-only items (r n,)) of a betting test in the job's seeded order. i.i.d. (the papers'
    protocol): the first n items get human labels, the next r n judge labels only, all distinct. Without replacement:
    the judge-only items are the first r n of an independent order, so each stream is a uniform draw from the table
    (docs/statistics.md, "Sampling without replacement")."""
    order = item_order(n_items, seed)
    if not without_replacement:
        return order[:n], order[n : n + r * n]
    return order[:n], item_order(n_items, [int(seed), JUDGE_ORDER_STREAM])[: r * n]


def sample_replications(table: LossTable, reps: int, n: int, N: int, *, seed: int = 0):
    """The paper's protocol vectorised over replications: per replication one random permutation of the items (shared by
    all candidates); the first n get human labels, the next N judge labels only. Returns ``human (reps, K, n)``,
    ``judge_labeled (reps, K, n)``, ``judge_unlabeled (reps, K, N)``."""
    if table.judge is None:
        raise ValueError("the table has no judge column")
    I = table.items.size
    if n < 1 or N < 0 or n + N > I:
        raise ValueError(f"need 1 <= n and n + N <= {I} items, got n={n}, N={N}")
    perm = item_order(I, seed, reps)[:, : n + N]  # (reps, n + N)
    h = table.human[:, perm].transpose(1, 0, 2)  # (reps, K, n + N)
    j = table.judge[:, perm].transpose(1, 0, 2)
    return h[..., :n], j[..., :n], j[..., n:]


DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "examples" / "data"
def _read_embeddings(path):
    """(sorted items, features (items, d), sub-source per item) from a table with columns ``item``, ``e0..e{d-1}`` and
    optionally ``dataset``."""
    emb = read_table(path, "features file")
    e_item = id_column(_column(emb, "item", path), "item", path)
    cols = sorted((c for c in emb.column_names if c.startswith("e") and c[1:].isdigit()), key=lambda c: int(c[1:]))
    if not cols:
        raise ValueError(f"{path}: no embedding columns e0, e1, ...")
    if np.unique(e_item).size != e_item.size:
        raise ValueError(f"{path}: duplicated items")
    feats = np.column_stack([_numeric(_column(emb, c, path), c, path) for c in cols])
    subsets = _column(emb, "dataset", path).astype(str) if "dataset" in emb.column_names \
        else np.zeros(e_item.size, dtype=str)
    order = np.argsort(e_item)
    return e_item[order], feats[order], subsets[order]


def load_features(path, items: np.ndarray) -> np.ndarray:
    """Item embeddings (a table: ``item``, ``e0..e{d-1}``) aligned to ``items``: (len(items), d); every item needs
    exactly one row, extra rows are ignored."""
    e_items, feats, _ = _read_embeddings(path)
    pos = match_items(e_items, items)
    missing = pos < 0
    if missing.any():
        raise ValueError(f"{path}: {int(missing.sum())} item(s) of the loss table have no embedding")
    return feats[pos]


@dataclass(frozen=True)
class ReplaySpec:
    """Recorded losses: the candidate's (human, judge) rows of the job's loss table, which travel once per host beside
    the spec."""

    kind = "replay"

    def build(self, arrays, rows) -> ReplaySource:
        return ReplaySource(rows[0], rows[1])


class ReplaySource:
    """Label source over one candidate's recorded losses (a :class:`LossTable` row): only the losses asked for are
    revealed, and costs count as a live source's would (a human label per (candidate, item), a judge label per judge
    call, a request per server call: the target's generation of a new item plus the judge's). Asking again is free."""

    def __init__(self, human: np.ndarray, judge: np.ndarray | None = None):
        self._human = np.asarray(human, dtype=np.float64)
        self._judge = None if judge is None else np.asarray(judge, dtype=np.float64)
        self._generated = np.zeros(self._human.size, dtype=bool)
        self._human_done = np.zeros(self._human.size, dtype=bool)
        self._judge_done = np.zeros(self._human.size, dtype=bool)
        self.requests = 0
        self.log: list = []  # (items, role, losses) of every label bought, in order

    @property
    def n_items(self) -> int:
        return self._human.size

    @property
    def human_labels(self) -> int:
        return int(self._human_done.sum())

    @property
    def judge_labels(self) -> int:
        return int(self._judge_done.sum())

    def prime(self, items) -> None:
        """Items whose generation was already paid for (labels restored from a job's log): their later labels cost no
        generation again."""
        self._generated[np.asarray(items, dtype=np.int64)] = True

    def _generate(self, items: np.ndarray) -> None:
        new = ~self._generated[items]
        self.requests += int(np.count_nonzero(new))
        self._generated[items] = True

    def human(self, items) -> np.ndarray:
        """Human losses of ``items`` (the costly labels)."""
        items = np.asarray(items, dtype=np.int64)
        self._generate(items)
        new = items[~self._human_done[items]]
        if new.size:
            self.log.append((new, "human", self._human[new]))
        self._human_done[items] = True
        return self._human[items]

    def judge(self, items) -> np.ndarray:
        """The judge's losses on ``items``."""
        if self._judge is None:
            raise ValueError("this source has no judge losses")
        items = np.asarray(items, dtype=np.int64)
        self._generate(items)
        new = ~self._judge_done[items]
        self.requests += int(np.count_nonzero(new))
        if new.any():
            self.log.append((items[new], "judge", self._judge[items[new]]))
        self._judge_done[items] = True
        return self._judge[items]
