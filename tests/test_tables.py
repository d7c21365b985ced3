"""Users' tables: Parquet, CSV, TSV, JSON Lines and in-memory tables read alike; string item ids."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from certsel.workers.replay import DEFAULT_TABLE, load_features, load_loss_table
from certsel.workers.tables import id_column, match_items, read_table, table_format

COLUMNS = ["candidate", "item", "loss_human", "loss_judge_best", "rank", "avg_bitwidth"]


@pytest.fixture(scope="module")
def bundled():
    # float64 losses: a float32 column written as text reads back as the nearest float64;
    # every candidate on the first 300 items (14,400 rows: every column's values and types,
    # at a thirtieth of the size, so the text formats' round trips take a fraction of a second)
    table = pq.read_table(DEFAULT_TABLE).select(COLUMNS)
    table = table.filter(pc.less(table.column("item"), 300))
    return table.cast(pa.schema([f.with_type(pa.float64()) if pa.types.is_floating(f.type) else f
                                 for f in table.schema]))


def _write(table: pa.Table, path):
    fmt = table_format(path)
    if fmt == "Parquet":
        pq.write_table(table, path)
    elif fmt in ("CSV", "TSV"):
        pacsv.write_csv(table, path, write_options=pacsv.WriteOptions(delimiter="\t" if fmt == "TSV" else ","))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".tsv", ".jsonl", ".ndjson"])
def test_every_format_gives_the_same_loss_table(bundled, tmp_path, suffix):
    ref = load_loss_table(bundled, judge="loss_judge_best")
    got = load_loss_table(_write(bundled, tmp_path / f"t{suffix}"), judge="loss_judge_best")
    np.testing.assert_array_equal(got.candidates, ref.candidates)
    np.testing.assert_array_equal(got.items, ref.items)
    np.testing.assert_array_equal(got.human, ref.human)
    np.testing.assert_array_equal(got.judge, ref.judge)
    np.testing.assert_array_equal(got.objective, ref.objective)


def test_pandas_dataframe_and_dict_of_columns(bundled):
    ref = load_loss_table(bundled, judge="loss_judge_best")
    from_pandas = load_loss_table(bundled.to_pandas(), judge="loss_judge_best")
    from_dict = load_loss_table(bundled.to_pydict(), judge="loss_judge_best")
    for got in (from_pandas, from_dict):
        np.testing.assert_array_equal(got.human, ref.human)
        np.testing.assert_array_equal(got.candidates, ref.candidates)


def test_string_item_ids_are_kept_and_match_features(bundled, tmp_path):
    ids = pa.array([f"q{i:05d}" for i in bundled.column("item").to_pylist()])
    table = bundled.set_column(1, "item", ids)
    ref = load_loss_table(bundled, judge="loss_judge_best")
    got = load_loss_table(_write(table, tmp_path / "s.csv"), judge="loss_judge_best")
    assert got.items.dtype.kind == "U" and got.items[0] == "q00000"
    np.testing.assert_array_equal(got.human, ref.human)  # zero-padded ids sort like the integers
    emb = pa.table({"item": ["q00002", "q00000", "q00001"], "e0": [2.0, 0.0, 1.0]})
    path = _write(emb, tmp_path / "emb.jsonl")
    np.testing.assert_array_equal(load_features(path, np.array(["q00001", "q00002"])), [[1.0], [2.0]])
    with pytest.raises(ValueError, match="1 item\\(s\\) of the loss table have no embedding"):
        load_features(path, np.array(["q00001", "q00009"]))


def test_integer_and_string_ids_compare_as_text():
    have = np.array([3, 7, 11])
    np.testing.assert_array_equal(match_items(have, np.array(["7", "11", "007"])), [1, 2, -1])
    np.testing.assert_array_equal(match_items(have, np.array([11, 3, 5])), [2, 0, -1])
    np.testing.assert_array_equal(match_items(np.array(["b", "a"])[[1, 0]], np.array(["b"])), [1])


def test_bad_tables_name_the_file_and_the_format(bundled, tmp_path):
    with pytest.raises(ValueError, match=r"unknown table format '\.xlsx' \(use one of \.parquet"):
        read_table(tmp_path / "t.xlsx")
    with pytest.raises(ValueError, match="loss table not found"):
        read_table(tmp_path / "none.csv", "loss table")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"junk.parquet: not a readable Parquet file \(ArrowInvalid"):
        read_table(tmp_path / "junk.parquet")
    (tmp_path / "array.json").write_text(json.dumps(bundled.slice(0, 3).to_pylist()))
    with pytest.raises(ValueError, match=r"not a readable JSON Lines file \(one object per line, not a JSON array\)"):
        read_table(tmp_path / "array.json")
    (tmp_path / "ragged.csv").write_text("candidate,item,loss_human\na,1,0\nb,2\n")
    with pytest.raises(ValueError, match="ragged.csv: not a readable CSV file"):
        read_table(tmp_path / "ragged.csv")
    with pytest.raises(ValueError, match="expected a file path or a table"):
        read_table(42, "data")
    with pytest.raises(ValueError, match="must hold integer or string item ids, got float64"):
        id_column(np.array([1.0, 2.0]), "item", "t.csv")
    with pytest.raises(ValueError, match="missing item ids"):
        id_column(np.array(["a", None], dtype=object), "item", "t.csv")
