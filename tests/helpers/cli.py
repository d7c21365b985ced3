"""The ``certsel`` command as a user runs it, for the tests: the installed script in a real
subprocess, a small real loss table, a job file on it and the MLflow runs it made."""

import pathlib
import shutil
import sqlite3
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from certsel.workers.replay import DATA_DIR

CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def run(*args, cwd=None):
    return subprocess.run([CERTSEL, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def small_table(path, *, loss=None, rows=True):
    """3 candidates x 200 items of real TriviaQA losses (optionally corrupted)."""
    t = pq.read_table(DATA_DIR / "triviaqa_llama31_8b_mx.parquet",
                      columns=["candidate", "rank", "avg_bitwidth", "item", "loss_human", "loss_judge_best"])
    t = t.filter(pa.compute.is_in(t["candidate"], pa.array(["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m6_r8_k16"])))
    t = t.filter(pa.compute.less(t["item"], 200))
    if loss is not None:
        h = t["loss_human"].to_numpy().copy()
        h[5] = loss
        t = t.set_column(t.column_names.index("loss_human"), "loss_human", pa.array(h))
    if not rows:
        t = t.slice(0, 0)
    pq.write_table(t, path)
    return path


def job_file(tmp_path, **over):
    cfg = {
        "data": {"path": str(small_table(tmp_path / "t.parquet")), "judge": "loss_judge_best", "order": "rank"},
        "objective": {"column": "avg_bitwidth"}, "budget": {"n": 50, "r": 3, "batch": 10},
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    for k, v in over.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def n_runs(tmp_path) -> int:
    db = tmp_path / "store.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from runs").fetchone()[0]
