"""Realistic mistakes a user makes with the command line, each run for real.

Each :class:`Mistake` writes a small job (3 real TriviaQA candidates x 200 items) into a
fresh folder, breaks one thing the way users do, runs ``certsel`` and records the exit
status, the message and whether anything was left behind (a job folder, an MLflow run).
``tests/test_mistakes.py`` asserts on every one; ``benchmarks/bad_input_table.py`` prints
them as the table in docs/reliability.md.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRIVIA = ROOT / "examples" / "data" / "triviaqa_llama31_8b_mx.parquet"
CERTSEL = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
THREE = ["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m6_r8_k16"]


def table() -> pa.Table:
    t = pq.read_table(TRIVIA, columns=["candidate", "rank", "avg_bitwidth", "item", "loss_human", "loss_judge_best"])
    t = t.filter(pa.compute.is_in(t["candidate"], pa.array(THREE)))
    return t.filter(pa.compute.less(t["item"], 200))


def replace(t: pa.Table, name: str, values) -> pa.Table:
    return t.set_column(t.column_names.index(name), name, pa.array(values))


@dataclass
class Folder:
    """The working folder of one mistake: its job file, its table, its outputs."""

    path: pathlib.Path

    def job(self, **over) -> pathlib.Path:
        cfg = {"name": "mistake", "data": {"path": "t.parquet", "judge": "loss_judge_best", "order": "rank"},
               "objective": {"column": "avg_bitwidth"}, "budget": {"n": 50, "r": 3, "batch": 10},
               "tracking": {"uri": f"sqlite:///{self.path}/store.db"}, "state": {"dir": str(self.path / "jobs")}}
        for k, v in over.items():
            cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
        path = self.path / "job.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def data(self, t: pa.Table | None = None, name: str = "t.parquet") -> pathlib.Path:
        path = self.path / name
        pq.write_table(table() if t is None else t, path)
        return path

    def left_behind(self) -> list[str]:
        out = []
        jobs = self.path / "jobs"
        if jobs.is_dir() and any(p.is_dir() for p in jobs.iterdir()):
            out.append("job folder")
        db = self.path / "store.db"
        if db.exists():
            with sqlite3.connect(db) as con:
                try:
                    if con.execute("select count(*) from runs").fetchone()[0]:
                        out.append("MLflow run")
                except sqlite3.OperationalError:
                    pass
        return out


@dataclass(frozen=True)
class Mistake:
    what: str  # the mistake, in the user's words
    setup: Callable[[Folder], list[str]]  # writes the files, returns the command line after `certsel`
    expect: str  # a fragment of the one-line message
    status: int = 2
    # run as a real process: the mistakes whose handling touches the process itself (Ray's start,
    # importing a user's module); the others run cli.main in this process, as the command line does
    process: bool = False


def _job_with(**over):
    def setup(f: Folder):
        f.data()
        return ["run", str(f.job(**over)), "--no-progress"]
    return setup


def _table_with(change, name="t.parquet", **over):
    def setup(f: Folder):
        t = change(table())
        if name.endswith(".csv"):
            pacsv.write_csv(t, f.path / name)
        else:
            f.data(t, name)
        return ["run", str(f.job(data={"path": name}, **over)), "--no-progress"]
    return setup


def _file(name: str, content: bytes | str, **over):
    def setup(f: Folder):
        p = f.path / name
        p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content)
        return ["run", str(f.job(data={"path": name}, **over)), "--no-progress"]
    return setup


def _args(*extra, **over):
    def setup(f: Folder):
        f.data()
        return ["run", str(f.job(**over)), "--no-progress", *[a.format(dir=f.path) for a in extra]]
    return setup


def _raw_yaml(text: str):
    def setup(f: Folder):
        f.data()
        (f.path / "job.yaml").write_text(text)
        return ["run", str(f.path / "job.yaml")]
    return setup


def _plain(*argv):
    def setup(f: Folder):
        f.data()
        f.job()
        return [a.format(dir=f.path) for a in argv]
    return setup


def _foreign_store(f: Folder):
    """certsel gate with --labels naming an SQLite file of another program (an MLflow store, say)."""
    f.data()
    with sqlite3.connect(f.path / "other.db") as db:
        db.execute("create table experiments (id integer, name text)")
    return ["gate", str(f.job()), "--labels", str(f.path / "other.db"), "--no-tracking"]


def _python_source(ref: str):
    def setup(f: Folder):
        cands = [{"id": "a", "objective": 1.0}, {"id": "b", "objective": 2.0}]
        return ["run", str(f.job(data=None, source={"python": ref, "items": 100, "candidates": cands},
                                 procedure="bonferroni", objective={"column": "size"}, policy={"kind": "r-eval"})),
                "--no-progress"]
    return setup


def _no_data(**over):
    def setup(f: Folder):
        cfg = yaml.safe_load(f.job().read_text())
        del cfg["data"]
        cfg.update(over)
        (f.path / "job.yaml").write_text(yaml.safe_dump(cfg))
        return ["run", str(f.path / "job.yaml"), "--no-progress"]
    return setup


def _scores(change=None):
    """The three candidates' scores (score_human, score_fp_human) on 200 items, changed."""
    t = pq.read_table(TRIVIA, columns=["candidate", "rank", "avg_bitwidth", "item", "score_human", "score_fp_human"])
    t = t.filter(pa.compute.is_in(t["candidate"], pa.array(THREE)))
    t = t.filter(pa.compute.less(t["item"], 200))
    return t if change is None else change(t)


def _recovery(change=None, **over):
    def setup(f: Folder):
        f.data(_scores(change))
        return ["run", str(f.job(data={"path": "t.parquet", "judge": None, "score": "score_human",
                                       "reference": "score_fp_human", "order": "rank"},
                                 recovery={"at_least": 0.95}, policy={"kind": "r-eval"}, **over)), "--no-progress"]
    return setup


def _tasks(second=None, **task_over):
    def setup(f: Folder):
        f.data()
        f.data(table() if second is None else second(table()), "t2.parquet")
        cfg = yaml.safe_load(f.job().read_text())
        data = cfg.pop("data")
        cfg["tasks"] = [{"name": "first", "data": data, "alpha": 0.1},
                        {"name": "second", "data": {**data, "path": "t2.parquet"}, "alpha": 0.2, **task_over}]
        (f.path / "job.yaml").write_text(yaml.safe_dump(cfg))
        return ["run", str(f.path / "job.yaml"), "--no-progress"]
    return setup


def _lm_eval(task: str):
    def setup(f: Folder):
        cfg = yaml.safe_load(f.job().read_text())
        del cfg["data"]
        cfg.update(labels={"kind": "lm-eval", "task": task, "candidates": [
            {"id": "m", "model": "local-completions", "model_args": "base_url=http://127.0.0.1:9/v1/completions,model=m"}]},
            policy={"kind": "r-eval"}, objective=None)
        (f.path / "job.yaml").write_text(yaml.safe_dump(cfg))
        return ["run", str(f.path / "job.yaml"), "--no-progress"]
    return setup


MISTAKES = [
    # the job file
    Mistake("job file path mistyped", _plain("run", "{dir}/jbo.yaml"), "config file not found"),
    Mistake("YAML indentation broken", _raw_yaml("name: x\n  data: [\n"), "not valid YAML"),
    Mistake("job file is a list", _raw_yaml("- data: t.parquet\n"), "the top level must be a mapping"),
    Mistake("misspelled section (budgt)", _job_with(budgt={"n": 10}), "unknown key 'budgt'"),
    Mistake("misspelled key inside a section", _job_with(budget={"human": 3}), "unknown key 'budget.human'"),
    Mistake("alpha as a percentage (10)", _job_with(alpha=10), "alpha: Input should be less than 1"),
    Mistake("delta = 0", _job_with(delta=0), "delta: Input should be greater than 0"),
    Mistake("negative budget", _job_with(budget={"n": -5}), "budget.n: Input should be greater than 0"),
    Mistake("budget as words", _job_with(budget={"n": "many"}), "budget.n: Input should be a valid integer"),
    Mistake("unknown policy kind", _job_with(policy={"kind": "r-autoeval++"}), "policy.kind"),
    Mistake("unknown betting strategy", _job_with(policy={"kind": "r-eval", "betting": "kelly"}), "betting"),
    Mistake("unknown procedure", _job_with(procedure="sidak"), "procedure"),
    Mistake("Holm with an estimation policy", _job_with(procedure="holm", policy={"kind": "seq"}),
            "procedure 'holm' needs e-values"),
    Mistake("FST without an order", _job_with(procedure="fst",
                                              data={"path": "t.parquet", "judge": "loss_judge_best", "order": None}),
            "order"),
    Mistake("no data, live or source section", _no_data(), "data"),
    Mistake("plugin module that does not exist", _job_with(plugins=["my_betting"]), "cannot import 'my_betting'",
            process=True),
    # the data
    Mistake("table path mistyped", _job_with(data={"path": "t.parqet"}), "file not found"),
    Mistake("an Excel file", _file("t.xlsx", b"PK\x03\x04"), "unknown table format '.xlsx'"),
    Mistake("a truncated Parquet file", _file("t.parquet", b"PAR1\x00\x01"), "not a readable Parquet file"),
    Mistake("a CSV with a ragged row", _file("t.csv", "candidate,item,loss_human\na,1,0\nb,2\n"),
            "not a readable CSV file"),
    Mistake("a JSON array instead of JSON Lines", _file("t.json", json.dumps([{"candidate": "a"}])),
            "not a readable JSON Lines file (one object per line"),
    Mistake("human-loss column misspelled", _job_with(data={"human": "loss_humn"}), "missing column 'loss_humn'"),
    Mistake("judge column that is not there", _job_with(data={"judge": "loss_judge_gpt4"}),
            "missing column 'loss_judge_gpt4'"),
    Mistake("losses in percent", _table_with(lambda t: replace(t, "loss_human", t["loss_human"].to_numpy() * 100)),
            "has values outside [0.0, 1.0]"),
    Mistake("a missing loss (NaN)", _table_with(lambda t: replace(t, "loss_human", np.where(
        np.arange(t.num_rows) == 7, np.nan, t["loss_human"].to_numpy()))), "NaN/inf value(s)"),
    Mistake("accuracy given as text", _table_with(lambda t: replace(t, "loss_human", ["0"] * t.num_rows)),
            "must be numeric"),
    Mistake("the same item twice", _table_with(lambda t: replace(t, "item", np.where(
        np.arange(t.num_rows) == 1, t["item"].to_numpy()[0], t["item"].to_numpy()))), "duplicated (candidate, item) rows"),
    Mistake("a candidate missing items", _table_with(lambda t: t.slice(0, t.num_rows - 3)),
            "candidates do not all cover the same"),
    Mistake("item ids as floats (1.0)", _table_with(lambda t: replace(t, "item", t["item"].to_numpy().astype(float))),
            "must hold integer or string item ids, got float64"),
    Mistake("an empty table", _table_with(lambda t: t.slice(0, 0)), "has no rows"),
    Mistake("objective column that is not there", _job_with(objective={"column": "size_gb"}),
            "missing column 'size_gb'"),
    Mistake("objective varying within a candidate", _table_with(lambda t: replace(
        t, "avg_bitwidth", np.arange(t.num_rows, dtype=float))), "must be constant within each candidate"),
    Mistake("order lists an unknown candidate", _job_with(order=["mx_m10_r8_k16", "mx_m1_r1_k1"]),
            "order: unknown candidate(s) not in the data: mx_m1_r1_k1"),
    Mistake("a candidate listed twice", _job_with(candidates=["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m8_r8_k16"]),
            "duplicate candidate ids: mx_m8_r8_k16"),
    Mistake("budget larger than the table", _job_with(budget={"n": 100}),
            "items needed per candidate but the table has 200"),
    Mistake("Cer-Eval without item features", _job_with(policy={"kind": "cer-eval"}, procedure="bonferroni"),
            "features"),
    Mistake("label function not module:function", _python_source("my_labels.losses"),
            "source.python must name a function as 'module:function'"),
    Mistake("label function's module missing", _python_source("nowhere_labels:losses"),
            "cannot import module 'nowhere_labels'"),
    # the command line
    Mistake("key=value without --set", _args("budget.n=100"), "write --set KEY=VALUE"),
    Mistake("--set with a misspelt key", _args("--set", "budgt.n=100"),
            "--set budgt.n=100: unknown key 'budgt' (did you mean 'budget'?)"),
    Mistake("--set with a misspelt data path", _args("--set", "data.path=t.parquett"),
            "--set data.path=t.parquett: data.path: file not found"),
    Mistake("a misspelt data path", _job_with(data={"path": "t.parquett"}), "(did you mean 't.parquet'?)"),
    Mistake("R-AutoEval+ on a table without a judge", _job_with(data={"judge": None}, policy={"kind": "r-autoeval+"}),
            "without a judge, policy.kind: r-eval"),
    Mistake("certsel gate --only with a misspelt candidate", _plain("gate", "{dir}/job.yaml", "--only",
                                                                    "mx_m10_r8_k1", "--no-tracking"),
            "--only: unknown candidate(s) not in the data: mx_m10_r8_k1"),
    Mistake("a label store that is another program's database", _foreign_store, "another program's SQLite database"),
    Mistake("--set without a value", _args("--set", "budget.n"), "is not KEY=VALUE"),
    Mistake("--json into a folder that does not exist", _args("--json", "{dir}/out/sel.json"), "--json: folder"),
    Mistake("--json naming a folder", _args("--json", "{dir}"), "is a folder, not a file"),
    Mistake("--output naming a file", _args("--output", "{dir}/t.parquet"), "is a file, not a folder"),
    Mistake("--format misspelled", _args("--format", "jsn"), "argument --format: invalid choice"),
    Mistake("--resume with a made-up id", _args("--resume", "abc123"), "no job abc123"),
    Mistake("--resume with a name, not an id", _args("--resume", "my-job"), "is not a job id"),
    Mistake("--fresh and --resume together", _args("--fresh", "--resume", "abc123"), "exclude each other"),
    # the infrastructure
    Mistake("tracking server not running", _args(tracking={"uri": "http://127.0.0.1:9"}),
            "no MLflow server answers within 5 s"),
    Mistake("tracking database in a missing folder", _args(tracking={"uri": "sqlite:////nonexistent/x/store.db"}),
            "does not exist"),
    Mistake("Ray cluster address wrong", _args(ray={"address": "127.0.0.1:9"}), "unreachable", process=True),
    # recovery jobs, several tasks, lm-eval
    Mistake("recovery and alpha both given", _recovery(alpha=0.1), "give one target: recovery"),
    Mistake("recovery score column on a 0-100 scale",
            _recovery(lambda t: replace(t, "score_human", np.asarray(t["score_human"]) * 100)),
            "column 'score_human' has values outside [0.0, 1.0]"),
    Mistake("recovery against a reference that scored 0 everywhere",
            _recovery(lambda t: replace(t, "score_fp_human", np.zeros(t.num_rows))),
            "recovery against a zero reference score is undefined"),
    Mistake("two tasks whose tables hold different candidates",
            _tasks(lambda t: t.filter(pa.compute.not_equal(t["candidate"], THREE[1]))),
            "task 'second' does not have the candidates of task 'first'"),
    Mistake("a task with alpha and recovery", _tasks(recovery=0.9), "task 'second': give one target"),
    Mistake("an lm-eval task name that does not exist", _lm_eval("gsm9k"), "unknown lm-eval task 'gsm9k'"),
    # the other commands
    Mistake("certsel show with an unknown run", _plain("show", "0123456789abcdef", "--tracking-uri",
                                                       "sqlite:///{dir}/nothing.db"), "no tracking store at"),
    Mistake("certsel audit with 5 repetitions", _plain("audit", "{dir}/job.yaml", "--reps", "5", "--no-tracking"),
            "--reps must be at least 10"),
    Mistake("certsel jobs in a folder with no jobs", _plain("jobs", "{dir}/nojobs"), "no jobs folder"),
    Mistake("certsel with no command", _plain(), "", status=2),
]


@dataclass(frozen=True)
class Outcome:
    status: int
    message: str  # the last line on stderr
    lines: int  # lines on stderr
    left: list[str]
    seconds: float


def attempt(m: Mistake, folder: pathlib.Path, process: bool | None = None) -> Outcome:
    """``m`` run in ``folder``: by ``certsel`` in a process of its own where ``process`` (default:
    the mistake's own flag), else by :func:`certsel.cli.main` here, with the same working folder
    and environment and its standard error captured."""
    folder.mkdir(parents=True, exist_ok=True)
    f = Folder(folder)
    argv = m.setup(f)
    t0 = time.monotonic()
    if m.process if process is None else process:
        p = subprocess.run([CERTSEL, *argv], capture_output=True, text=True, timeout=300, cwd=folder)
        status, stderr = p.returncode, p.stderr
    else:
        status, stderr = in_process(argv, folder)
    err = stderr.strip().splitlines()
    return Outcome(status, err[-1] if err else "", len(err), f.left_behind(), time.monotonic() - t0)


def in_process(argv: list[str], cwd: pathlib.Path) -> tuple[int, str]:
    """``certsel ARGV`` through :func:`certsel.cli.main` in this process: (exit status, stderr)."""
    import contextlib
    import io
    import logging
    import os

    from certsel import cli

    err, out = io.StringIO(), io.StringIO()
    here, env, level = os.getcwd(), dict(os.environ), logging.getLogger().level
    try:
        os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                status = cli.main(argv)
            except SystemExit as exc:  # argparse's own exit
                status = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(env)
        logging.getLogger().setLevel(level)
    return status, err.getvalue()
