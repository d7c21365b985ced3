"""The replay label source: costs counted as a live source would incur them; features aligned."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from certsel.workers.replay import ReplaySource, load_features


def test_costs_and_idempotent_requests():
    src = ReplaySource(np.linspace(0, 1, 10), np.linspace(1, 0, 10))
    np.testing.assert_allclose(src.human([1, 2]), [1 / 9, 2 / 9])
    assert (src.human_labels, src.judge_labels, src.requests) == (2, 0, 2)  # two generations
    np.testing.assert_allclose(src.judge([2, 3]), [7 / 9, 6 / 9])
    # item 3 is new (generation + judge call), item 2 needs only the judge call
    assert (src.human_labels, src.judge_labels, src.requests) == (2, 2, 5)
    src.human([1, 2])
    src.judge([2, 3])
    assert (src.human_labels, src.judge_labels, src.requests) == (2, 2, 5)  # asking again is free
    with pytest.raises(ValueError, match="no judge losses"):
        ReplaySource(np.zeros(3)).judge([0])


def test_features_are_aligned_and_complete(tmp_path):
    path = tmp_path / "emb.parquet"
    pq.write_table(pa.table({"item": [30, 10, 20], "e0": [3.0, 1.0, 2.0], "e1": [-3.0, -1.0, -2.0]}), path)
    np.testing.assert_array_equal(load_features(path, np.array([10, 30])), [[1.0, -1.0], [3.0, -3.0]])
    with pytest.raises(ValueError, match="1 item\\(s\\) of the loss table have no embedding"):
        load_features(path, np.array([10, 40]))
    pq.write_table(pa.table({"item": [1, 1], "e0": [0.0, 1.0]}), path)
    with pytest.raises(ValueError, match="duplicated items"):
        load_features(path, np.array([1]))
    with pytest.raises(ValueError, match="features file not found"):
        load_features(tmp_path / "none.parquet", np.array([1]))
