"""The label store's file (workers/label_store.py): a store that cannot be one is bad input, named in one line with
exit status 2, and is left as it was."""

import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from certsel import cli
from certsel.workers import label_store
from certsel.workers.label_store import LabelStore


def _job(tmp_path):
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"candidate": ["a"] * 100, "item": list(range(100)),
                             "loss_human": (rng.random(100) < 0.05).astype(float).tolist()}), tmp_path / "t.parquet")
    job = tmp_path / "gate.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}}}\npolicy: {{kind: r-eval}}\nalpha: 0.2\n"
                   f"budget: {{n: 50}}\nstate: {{dir: {tmp_path / 'jobs'}}}\n")
    return job


def _gate(tmp_path, store):
    return cli.main(["gate", str(_job(tmp_path)), "--no-tracking", "--labels", str(store), "--home",
                     str(tmp_path / "home")])


def test_a_corrupt_store_exits_2_naming_the_file_and_is_left_as_it_was(tmp_path, capsys):
    store = tmp_path / "labels.db"
    good = LabelStore(store)
    good.put("x", "human", [1, 2], [0.0, 1.0])
    good.close()
    blob = bytearray(store.read_bytes())
    blob[100:4096] = b"\xff" * (4096 - 100)  # the first page's B-tree overwritten
    store.write_bytes(bytes(blob))
    assert _gate(tmp_path, store) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"certsel: error: label store {store}:") and len(err.splitlines()) == 1
    assert store.read_bytes() == bytes(blob)


def test_a_file_that_is_no_database_exits_2(tmp_path, capsys):
    store = tmp_path / "labels.db"
    content = b"not a database at all\n" * 50
    store.write_bytes(content)
    assert _gate(tmp_path, store) == 2
    assert "not an SQLite database, or corrupt" in capsys.readouterr().err
    assert store.read_bytes() == content


def test_another_programs_database_and_a_folder_exit_2(tmp_path, capsys):
    foreign = tmp_path / "mlruns.db"
    with sqlite3.connect(foreign) as db:
        db.execute("create table experiments (id integer, name text)")
    before = foreign.read_bytes()
    assert _gate(tmp_path, foreign) == 2
    assert "another program's SQLite database (tables: experiments)" in capsys.readouterr().err
    assert foreign.read_bytes() == before
    folder = tmp_path / "folder.db"
    folder.mkdir()
    assert _gate(tmp_path, folder) == 2
    assert "is a folder, not a file" in capsys.readouterr().err


def test_a_store_locked_past_the_timeout_exits_2(tmp_path, capsys, monkeypatch):
    store = tmp_path / "labels.db"
    LabelStore(store).close()
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("begin immediate")  # another process writing, and not letting go
    monkeypatch.setattr(label_store, "LOCK_TIMEOUT", 0.2)
    try:
        assert _gate(tmp_path, store) == 2
        assert "locked by another process for more than 0.2 s" in capsys.readouterr().err
    finally:
        holder.execute("rollback")
        holder.close()
