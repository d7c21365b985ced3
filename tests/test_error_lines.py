"""Bad input names where it is: the line of the job file, the rows of the table (with their
candidate and item), the candidates short of items; a value given by --set is not blamed on
the file."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from certsel.config import ConfigError, load_config
from certsel.workers.replay import load_loss_table

JOB = """name: lines
data:
  path: t.parquet
objective: {column: size}
budget:
  n: 50
  r: three
"""


def _table(path, losses, items=None, cands=None):
    n = len(losses)
    pq.write_table(pa.table({"candidate": cands or ["a"] * (n // 2) + ["b"] * (n - n // 2),
                             "item": items or [i % (n // 2) for i in range(n)],
                             "loss_human": losses, "size": [1.0] * n}), path)
    return path


def test_a_config_error_names_its_line(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    with pytest.raises(ConfigError, match=r"job.yaml:7: budget.r: Input should be a valid integer"):
        load_config(tmp_path / "job.yaml")
    (tmp_path / "typo.yaml").write_text(JOB.replace("  r: three\n", "").replace("budget:", "budgt:"))
    with pytest.raises(ConfigError, match=r"typo.yaml:5: unknown key 'budgt' \(did you mean 'budget'\?\)"):
        load_config(tmp_path / "typo.yaml")
    # the same mistake made with --set: the --set is named, not the file
    (tmp_path / "ok.yaml").write_text(JOB.replace("r: three", "r: 3"))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "ok.yaml", ["budget.r=x"])
    assert str(err.value).startswith("--set budget.r=x: budget.r: Input should be a valid integer")
    with pytest.raises(ConfigError, match=r"^--set budget.bacth=10: unknown key 'budget.bacth' \(did you mean 'batch'\?\)$"):
        load_config(tmp_path / "ok.yaml", ["budget.bacth=10"])
    with pytest.raises(ConfigError, match=r"^--set alpha=1.5: alpha: Input should be less than 1$"):
        load_config(tmp_path / "ok.yaml", ["alpha=1.5"])
    with pytest.raises(ConfigError, match=r"got 'r-autoevl' \(did you mean 'r-autoeval'\?\)$"):
        load_config(tmp_path / "ok.yaml", ["policy.kind=r-autoevl"])
    with pytest.raises(ConfigError, match=r"unknown key 'zzz'$"):  # nothing close: no guess
        load_config(tmp_path / "ok.yaml", ["zzz=1"])


def test_table_errors_name_the_rows(tmp_path):
    losses = [0.0] * 10
    losses[3], losses[7] = 1.5, -0.25
    with pytest.raises(ValueError) as err:
        load_loss_table(_table(tmp_path / "t.parquet", losses), human="loss_human")
    msg = str(err.value)
    assert "has values outside [0.0, 1.0] (2 of them; min -0.25, max 1.5)" in msg
    assert "row 3 (candidate a, item 3: 1.5), row 7 (candidate b, item 2: -0.25)" in msg
    losses = [np.nan] * 5 + [0.0] * 5
    with pytest.raises(ValueError, match=r"5 NaN/inf value\(s\): row 0 \(candidate a, item 0\), row 1 .* and 2 more"):
        load_loss_table(_table(tmp_path / "n.parquet", losses), human="loss_human")
    with pytest.raises(ValueError, match=r"duplicated \(candidate, item\) rows: row 1 \(a, 0\)"):
        load_loss_table(_table(tmp_path / "d.parquet", [0.0] * 4, items=[0, 0, 0, 1], cands=["a", "a", "b", "b"]),
                        human="loss_human")
    with pytest.raises(ValueError, match=r"items per candidate: b \(1\)\)"):
        load_loss_table(_table(tmp_path / "s.parquet", [0.0] * 3, items=[0, 1, 0], cands=["a", "a", "b"]),
                        human="loss_human")
