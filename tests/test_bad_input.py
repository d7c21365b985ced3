"""Bad input: a ValueError naming the problem, never a silently clipped result."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from certsel.policies import (
    confidence_interval,
    evalue_path,
    evalue_paths,
    fixed_sequence,
    holm,
    select,
)
from certsel.policies.procedures import get_procedure
from certsel.workers.replay import load_loss_table

H = np.array([0.0, 1.0, 0.0, 0.0])
JL = np.array([0.0, 1.0, 1.0, 0.0])
JU = np.zeros(8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(human=[0.0, 1.5]), "human has values outside"),
        (dict(human=[0.0, -0.1]), "human has values outside"),
        (dict(human=[0.0, np.nan]), "human contains 1 NaN"),
        (dict(human=[0.0, np.inf]), "human contains 1 NaN or infinite"),
        (dict(human=[]), "human is empty"),
        (dict(judge_labeled=[0.0, 2.0, 0.0, 0.0]), "judge_labeled has values outside"),
        (dict(judge_unlabeled=np.full(8, np.nan)), "judge_unlabeled contains 8 NaN"),
        (dict(judge_unlabeled=np.zeros(3)), "N >= n"),
        (dict(judge_labeled=np.zeros(3)), "judge_labeled must have the shape"),
        (dict(alpha=0.0), "alpha must be in"),
        (dict(alpha=1.0), "alpha must be in"),
        (dict(alpha=float("nan")), "alpha must be in"),
        (dict(delta=1.2), "delta must be in"),
        (dict(delta=0), "delta must be in"),
        (dict(rhos=[]), "rhos must be a non-empty"),
        (dict(rhos=[0.5, 1.5]), "rhos must lie in"),
        (dict(rhos=[0.5, 0.5]), "duplicates"),
        (dict(betting="kelly"), "betting must be one of"),
        (dict(betting={"kind": "up", "prior": "flat"}), "up prior must be one of"),
        (dict(betting={"kind": "wsr", "c": 1.5}), r"wsr c must be in \(0, 1\)"),
        (dict(betting={"kind": "ons", "step": 1}), "unexpected keyword"),
        (dict(weights=[0.5, 0.5]), "weights must have one entry per rho"),
        (dict(rhos=[0.0, 1.0], weights=[1.0, 0.0]), "strictly positive"),
        (dict(horizon=2), "horizon=2 is smaller"),
        (dict(judge_labeled=None), "judge_labeled and judge_unlabeled are required"),
        (dict(loss_bounds=(1.0, 0.0)), "lo < hi"),
        (dict(alpha=3.0, loss_bounds=(0.0, 2.0)), r"alpha must be in \(0.0, 2.0\)"),
    ],
)
def test_evalue_path_rejects(kwargs, match):
    args = dict(human=H, judge_labeled=JL, judge_unlabeled=JU, alpha=0.1, delta=0.1, rhos=[0.0, 0.5, 1.0])
    args.update(kwargs)
    human, jl, ju = args.pop("human"), args.pop("judge_labeled"), args.pop("judge_unlabeled")
    with pytest.raises(ValueError, match=match):
        evalue_path(human, jl, ju, **args)


def test_batched_shape_mismatch():
    with pytest.raises(ValueError, match="batch shape"):
        evalue_paths(np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((3, 8)), alpha=0.1, delta=0.1)
    with pytest.raises(ValueError, match="1-D"):
        evalue_path(np.zeros((2, 4)), alpha=0.1, delta=0.1, rhos=[0.0])


def test_custom_loss_bounds_are_respected():
    h = np.array([2.0, 3.0, 2.5])
    with pytest.raises(ValueError, match="outside the declared loss bounds"):
        evalue_path(h, alpha=0.1, delta=0.1, rhos=[0.0])
    e = evalue_path(h, alpha=4.0, delta=0.1, rhos=[0.0], loss_bounds=(0.0, 5.0))
    assert np.all(e > 1)


def test_confidence_interval_rejects():
    with pytest.raises(ValueError, match="human has values outside"):
        confidence_interval([0.2, 1.2], delta=0.1, rhos=[0.0])
    with pytest.raises(ValueError, match="delta must be in"):
        confidence_interval([0.2, 0.3], delta=1.0, rhos=[0.0])


def test_multiple_testing_rejects():
    with pytest.raises(ValueError, match="order must be a permutation"):
        fixed_sequence([20.0, 30.0], 0.1, order=[0, 0])
    with pytest.raises(ValueError, match="non-negative"):
        holm([np.nan, 3.0], 0.1)
    with pytest.raises(ValueError, match="procedure must be one of"):
        get_procedure("sidak")
    with pytest.raises(ValueError, match="one value per candidate"):
        select([True, False], [1.0])
    with pytest.raises(ValueError, match="empty"):
        fixed_sequence(np.zeros((3, 0)), 0.1)


def _write(tmp_path, **cols):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path)
    return path


def test_loss_table_validation(tmp_path):
    ok = dict(candidate=["a", "a", "b", "b"], item=[0, 1, 0, 1], loss_human=[0.0, 1.0, 0.5, 0.0],
              loss_judge_best=[0.0, 1.0, 0.0, 0.0], rank=[0, 0, 1, 1], avg_bitwidth=[8.0, 8.0, 4.0, 4.0])
    t = load_loss_table(_write(tmp_path, **ok))
    assert t.human.shape == (2, 2) and t.candidates.tolist() == ["a", "b"]

    def bad(match, **change):
        cols = dict(ok)
        cols.update(change)
        with pytest.raises(ValueError, match=match):
            load_loss_table(_write(tmp_path, **cols))

    bad("outside", loss_human=[0.0, 1.0, 1.5, 0.0])
    bad("NaN", loss_human=[0.0, np.nan, 0.5, 0.0])
    bad("duplicated", item=[0, 0, 0, 1])
    bad("do not all cover the same", item=[0, 1, 0, 2])
    bad("must be numeric", loss_human=["x", "y", "z", "w"])
    bad("constant within each candidate", rank=[0, 1, 1, 1])
    with pytest.raises(ValueError, match="missing column 'loss_judge_med'"):
        load_loss_table(_write(tmp_path, **ok), judge="loss_judge_med")
    with pytest.raises(ValueError, match="not found"):
        load_loss_table(tmp_path / "nope.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable Parquet"):
        load_loss_table(tmp_path / "junk.parquet")


def test_python_source_references_are_checked():
    from certsel.workers.python_source import load_callable

    assert load_callable("json:dumps") is __import__("json").dumps
    assert load_callable("os:path.join") is __import__("os").path.join
    for ref, message in [("json.dumps", "must be 'module:function'"), ("no_such_module_x:f", "cannot import module"),
                         ("json:nope", "module 'json' has no 'nope'"), ("json:__name__", "is not callable")]:
        with pytest.raises(ValueError, match=message):
            load_callable(ref)


def test_a_failing_python_source_is_retried_then_named():
    from certsel.workers.contracts import SourceError
    from certsel.workers.python_source import PythonSource

    calls = []

    def flaky(candidate, items, role):
        calls.append(role)
        if len(calls) < 3:
            raise RuntimeError("busy")
        return np.zeros(len(items))

    src = PythonSource(flaky, "c", 10, retries=2, backoff=0.0)
    assert src.human([0, 1]).tolist() == [0.0, 0.0] and len(calls) == 3
    never = PythonSource(lambda c, i, r: 1 / 0, "c", 10, retries=1, backoff=0.0, name="mine")
    with pytest.raises(SourceError, match=r"mine failed for 'c' \(human\) after 2 attempt\(s\): division by zero"):
        never.human([0])
    assert never.human_labels == 0  # nothing half-bought
    silent = PythonSource(lambda c, i, r: None, "c", 25, name="forgot_return")
    with pytest.raises(SourceError, match=r"forgot_return returned None for 'c' \(human\); it must return one loss "
                                          r"per item \(25 here\)"):
        silent.human(np.arange(25))
