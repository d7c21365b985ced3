"""What `certsel run` leaves and prints, as a user meets it (real subprocesses, Ray, MLflow):
the output folder and its path, --format json/csv/markdown parsed back, ids intact on an
80-column terminal, late failures now caught before the first label, exit 1 when no
candidate could be evaluated, `certsel jobs`, and `certsel` alone."""

import csv
import io
import json
import os
import pty
import subprocess
import time

import pytest
import yaml

from helpers.cli import CERTSEL, job_file, n_runs, run

pytestmark = pytest.mark.integration


def _jobs(tmp_path):
    return [p for p in (tmp_path / "jobs").glob("*") if p.is_dir() and p.name != "tables"] \
        if (tmp_path / "jobs").exists() else []


def _job(tmp_path, **over):
    return job_file(tmp_path, state={"dir": str(tmp_path / "jobs")}, **over)


def _in_process(capsys):
    """``certsel ARGS`` in this process (cli.main, on the module's Ray): (exit status, stdout, stderr)."""
    from certsel import cli

    def main(*args):
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return main


def test_formats_parse_back_and_the_outputs_are_where_it_says(tmp_path, capsys):
    """Stdout holds the format alone."""
    main = _in_process(capsys)
    path = _job(tmp_path)
    code, out, err = main("run", str(path), "--format", "json", "--no-progress")
    assert code == 0, err
    cert = json.loads(out)  # stdout holds the JSON alone
    (job_dir,) = _jobs(tmp_path)
    assert json.loads((job_dir / "selection.json").read_text())["selected"] == cert["selected"]
    assert (job_dir / "report.html").is_file() and (job_dir / "labels.parquet").is_file()
    assert f"job {job_dir.name}" in err  # the job id (for --resume) still reaches the user
    # the same job again as CSV and Markdown, from its certificate (show reads MLflow)
    run_id = cert_run_id(tmp_path)
    _, out, _ = main("show", run_id, "--tracking-uri", f"sqlite:///{tmp_path}/store.db", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["candidate"] for r in rows] == [x["candidate"] for x in cert["candidates"]]
    assert {r["candidate"] for r in rows if r["selected"] == "True"} == {cert["selected"]}
    assert float(rows[0]["labels_human"]) == cert["candidates"][0]["labels_human"]
    _, out, _ = main("show", run_id, "--tracking-uri", f"sqlite:///{tmp_path}/store.db", "--format", "markdown")
    assert out.count("\n| ") == len(cert["candidates"]) + 1 and f"selected: {cert['selected']}" in out
    # the table format says where the report is
    code, out, err = main("run", str(path), "--no-progress", "--fresh", "--no-tracking", "--output",
                          str(tmp_path / "out"))
    assert code == 0, err
    assert f"report: {tmp_path / 'out' / 'report.html'}" in out and (tmp_path / "out" / "report.html").is_file()


def cert_run_id(tmp_path) -> str:
    import sqlite3

    with sqlite3.connect(tmp_path / "store.db") as con:
        (run_id,) = con.execute("select run_uuid from runs r join tags t using (run_uuid) where t.key = "
                                "'certsel.selected'").fetchone()
    return run_id


def _in_pty(args, cols=80, rows=50) -> str:
    """Run the CLI on a pseudo-terminal of ``cols`` columns; its whole output."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([CERTSEL, *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=600)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-2000:]
    return b"".join(chunks).decode(errors="replace")


def test_ids_intact_on_an_80_column_terminal(tmp_path):
    ids = ["quantized-llama-3.1-8b-instruct-mx4-rank8", "quantized-llama-3.1-8b-instruct-mx6-rank8",
           "quantized-llama-3.1-8b-instruct-mx9-rank8"]
    path = _job(tmp_path)
    table = tmp_path / "t.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(table)
    names = dict(zip(["mx_m6_r8_k16", "mx_m8_r8_k16", "mx_m10_r8_k16"], ids))
    t = t.set_column(0, "candidate", pa.array([names[c] for c in t.column("candidate").to_pylist()]))
    pq.write_table(t, table)
    out = _in_pty(["run", str(path), "--no-progress", "--no-tracking"])
    lines = out.splitlines()
    table = [_plain(line) for line in lines if any(c in line for c in "│┃┏┗┡└")]
    assert table and max(len(line) for line in table) <= 80, table  # (a long path may run past: it wraps)
    for name in ids:  # each id whole on one line of the table, never cut with an ellipsis
        assert any(name in _plain(line) for line in lines if "│" in line), name
    assert "…" not in out
    sel = next(line for line in out.splitlines() if line.startswith("selected: "))
    chosen = sel.split()[1]
    assert any(f"{chosen} *" in _plain(line) for line in lines)  # the selection's mark survives
    assert "not shown at this width" in out


def _plain(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text).rstrip("\r")


def test_late_failures_now_fail_before_the_first_label(tmp_path):
    path = _job(tmp_path)
    (tmp_path / "a_file").write_text("x")
    cases = [
        (["--json", str(tmp_path / "missing_dir" / "s.json")], "--json: folder"),
        (["--json", str(tmp_path)], "is a folder, not a file"),
        (["--output", str(tmp_path / "a_file")], "--output: "),
        (["--set", "tracking.uri=http://127.0.0.1:9"], "no MLflow server answers within 5 s"),
    ]
    for extra, message in cases:
        t0 = time.monotonic()
        p = run("run", str(path), "--no-progress", *extra)
        assert p.returncode == 2 and message in p.stderr and p.stderr.count("\n") == 1, (extra, p.stderr)
        assert time.monotonic() - t0 < 60
        assert not _jobs(tmp_path) and n_runs(tmp_path) == 0  # no job folder, no label, no run


def test_no_candidate_evaluated_exits_1(tmp_path):
    (tmp_path / "down_labels.py").write_text("def losses(candidate, items, role):\n"
                                             "    raise ConnectionError('grader is down')\n")
    cfg = {"source": {"python": "down_labels:losses", "items": 100, "retries": 0,
                      "candidates": [{"id": "a", "objective": 1.0}, {"id": "b", "objective": 2.0}]},
           "policy": {"kind": "r-eval"}, "budget": {"n": 50, "batch": 10}, "procedure": "bonferroni",
           "objective": {"column": "size"},
           "state": {"dir": str(tmp_path / "jobs")}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = run("run", str(path), "--no-progress", "--no-tracking")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "certsel: error: no candidate could be evaluated" in p.stderr and "grader is down" in p.stderr
    assert "selected: none" in p.stdout


def test_jobs_lists_and_removes(tmp_path, capsys):
    main = _in_process(capsys)
    path = _job(tmp_path)
    assert main("run", str(path), "--no-progress", "--no-tracking")[0] == 0
    (job_dir,) = _jobs(tmp_path)
    code, out, _ = main("jobs", str(tmp_path / "jobs"))
    assert code == 0 and job_dir.name in out and "finished" in out
    assert str(job_dir / "report.html") in out.replace("\n", "")
    _, out, _ = main("jobs", str(tmp_path / "jobs"), "--clean", "failed")
    assert "removed 0 job(s)" in out and job_dir.is_dir()
    _, out, _ = main("jobs", str(tmp_path / "jobs"), "--max-size", "1GB")  # within the limit: kept
    assert "removed 0 job(s)" in out and job_dir.is_dir()
    with pytest.raises(SystemExit) as bad:  # argparse's error: one line, exit 2
        main("jobs", str(tmp_path / "jobs"), "--max-size", "lots")
    assert bad.value.code == 2 and "'lots' is not a size" in capsys.readouterr().err
    code, out, _ = main("jobs", str(tmp_path / "jobs"), "--remove", job_dir.name)
    assert code == 0 and "removed 1 job(s)" in out and not job_dir.exists()
    code, _, err = main("jobs", str(tmp_path / "jobs"), "--remove", "abc")
    assert code == 2 and "no job abc" in err


def test_bare_command_prints_usage_and_log_level():
    p = subprocess.run([CERTSEL], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "COMMAND" in p.stdout and "run" in p.stdout and "gate" in p.stdout
    p = run("schema", "--log-level", "info")
    assert p.returncode == 0, p.stderr
    p = run("schema", "--log-level", "loud")
    assert p.returncode == 2 and "--log-level" in p.stderr


def test_one_home_for_every_output(tmp_path, capsys, monkeypatch):
    """A job file that names no folders: its job folder and the MLflow store go to certsel's
    home (--home here, CERTSEL_HOME or ~/.certsel otherwise), nothing beside the job file or
    in the working directory; `certsel jobs` from another folder lists it, and `certsel show`
    answers from the job's folder with the MLflow store gone (it never opened MLflow)."""
    main = _in_process(capsys)
    home, here, elsewhere = tmp_path / "home", tmp_path / "src", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    path = job_file(here, tracking=None)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({k: v for k, v in raw.items() if k != "tracking"}))
    monkeypatch.setenv("CERTSEL_HOME", str(home))  # restored after the test, --home's change included
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(here)
    code, out, err = main("run", "job.yaml", "--no-progress")
    assert code == 0, err
    (job_dir,) = [d for d in (home / "jobs").iterdir() if d.is_dir()]
    assert (job_dir / "report.html").is_file() and (home / "mlruns.db").is_file() and (home / "mlartifacts").is_dir()
    assert sorted(x.name for x in here.iterdir()) == ["job.yaml", "t.parquet"]  # nothing left in the source folder
    assert f"report: {job_dir / 'report.html'}" in out
    run_prefix = out.split("(certsel show ")[1].split(")")[0]
    monkeypatch.chdir(elsewhere)
    code, out, err = main("jobs")
    assert code == 0 and job_dir.name in out and "finished" in out, err
    (home / "mlruns.db").unlink()
    for ref in (run_prefix, job_dir.name[:6]):  # the MLflow run id as run prints it, or the job's id
        code, out, err = main("show", ref, "--format", "json")
        assert code == 0, err
        assert json.loads(out) == json.loads((job_dir / "selection.json").read_text())
    # --home moves all of it for one command; a home with no jobs yet is not an error
    other = tmp_path / "other"
    monkeypatch.chdir(here)
    code, _, err = main("run", "job.yaml", "--no-progress", "--no-tracking", "--home", str(other))
    assert code == 0 and len(list((other / "jobs").iterdir())) == 1, err
    code, out, _ = main("jobs", "--home", str(tmp_path / "nothing"))
    assert code == 0 and "no jobs yet in" in out

def test_a_piped_table_fits_100_columns_and_names_what_it_leaves_out(tmp_path):
    """In a CI log (stdout a pipe) the table is fitted to 100 columns, or to $COLUMNS: the
    columns left out are named under it, and --format csv still has every one."""
    path = _job(tmp_path)
    p = run("run", str(path), "--no-progress", "--no-tracking")
    assert p.returncode == 0, p.stderr
    table = [line for line in p.stdout.splitlines() if any(c in line for c in "│┃┏┗┡└")]
    assert table and max(len(line) for line in table) <= 100, table
    assert "not shown at this width" in p.stdout and "--format csv has every column" in p.stdout
    wide = subprocess.run([CERTSEL, "run", str(path), "--no-progress", "--no-tracking", "--fresh"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}, timeout=600)
    rows = [line for line in wide.stdout.splitlines() if any(c in line for c in "│┃┏┗┡└")]
    assert max(len(line) for line in rows) > 100 and "not shown at this width" not in wide.stdout


def test_max_size_deletes_finished_and_failed_jobs_oldest_first():
    import pathlib

    from certsel.cli.kept import over_size
    from certsel.cli.parser import size_bytes
    from certsel.orchestrator.engine.state import JobInfo

    def job(i, status, size):
        return JobInfo(f"j{i}", "x", status, f"2026-11-0{i}T00:00:00", 1, None, size, pathlib.Path("."))

    jobs = [job(1, "unfinished", 50), job(2, "finished", 30), job(3, "failed", 20), job(4, "finished", 40),
            job(5, "running", 10)]
    assert over_size(jobs, 150, set()) == []
    assert over_size(jobs, 100, set()) == ["j2", "j3"]  # 150 -> 100: the two oldest that may go
    assert over_size(jobs, 0, set()) == ["j2", "j3", "j4"]  # resumable and running jobs stay
    assert over_size(jobs, 100, {"j2"}) == ["j3"]  # already removed by --remove / --clean
    assert size_bytes("500MB") == 500 * 10**6 and size_bytes("2gb") == 2 * 10**9 and size_bytes("1024") == 1024


def test_a_minimal_table_runs_and_says_which_defaults_it_chose(tmp_path, capsys):
    """A user's table of model, question_id and loss runs as it is (exit 0), with the two lines of the defaults it
    chose, and selects among what it certified."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(20261207)  # not the job's seed: the job's item order is its own draw
    risks = np.repeat([0.02, 0.06, 0.3], 1500)
    pq.write_table(pa.table({"model": np.repeat(["small", "medium", "large"], 1500),
                             "question_id": np.tile(np.arange(1500), 3),
                             "loss": (rng.random(risks.size) < risks).astype(float)}), tmp_path / "mine.parquet")
    (tmp_path / "job.yaml").write_text("data: {path: mine.parquet, candidate: model, item: question_id, human: loss}\n")
    main = _in_process(capsys)
    code, out, err = main("run", str(tmp_path / "job.yaml"), "--no-progress", "--no-tracking", "--json",
                          str(tmp_path / "out.json"))
    assert code == 0, err
    assert "certsel: policy: r-eval (human labels alone): the table has no judge column" in err
    assert "certsel: procedure: holm (every candidate tested" in err
    cert = json.loads((tmp_path / "out.json").read_text())
    rows = {c["candidate"]: c for c in cert["candidates"]}
    inside = [n for n, c in rows.items() if c["certified"]]
    assert "large" not in inside and len(inside) >= 1  # risk 0.3 is not certified at alpha 0.1
    # selected: the certified one with the smallest bound (Holm's certified set shares alpha: then its own bound)
    assert cert["selected"] == min(inside, key=lambda n: (rows[n]["simultaneous_bound"], rows[n]["upper_bound"]))
    assert f"selected: {cert['selected']}" in out


def test_a_candidate_left_undecided_by_its_budget_is_named_with_the_budget_that_gives_it_every_item(tmp_path, capsys):
    """Issue 72, point 3: a Holm job on a 2,000-item table with the default budget leaves a candidate of true loss
    0.065 (alpha 0.1) uncertified; the answer says the budget was the limit, with the --set that gives it every item,
    and a gate with that budget decides it (continuing its test)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(42)
    risks = {"big-70b": 0.02, "mid-8b": 0.065, "small-1b": 0.2}
    pq.write_table(pa.table({"model": np.repeat(list(risks), 2000), "question_id": np.tile(np.arange(2000), 3),
                             "loss": np.concatenate([(rng.random(2000) < p).astype(float) for p in risks.values()])}),
                   tmp_path / "t.parquet")
    (tmp_path / "job.yaml").write_text("data: {path: t.parquet, candidate: model, item: question_id, human: loss}\n"
                                       "alpha: 0.1\n")
    main = _in_process(capsys)
    code, out, err = main("run", str(tmp_path / "job.yaml"), "--no-progress", "--no-tracking", "--json",
                          str(tmp_path / "out.json"))
    assert code == 0, err
    rows = {c["candidate"]: c for c in json.loads((tmp_path / "out.json").read_text())["candidates"]}
    assert rows["mid-8b"]["status"] == "not certified"
    flat = " ".join(out.split())
    assert ("budget: mid-8b ended undecided at budget.n = 300 (the table has 2,000 items): --set budget.n=2000 "
            "gives it every item; its own labels suggest about") in flat
    assert "budget: big-70b" not in flat and "budget: small-1b" not in flat  # certified and failed: not the budget
    code, out, err = main("gate", str(tmp_path / "job.yaml"), "--no-tracking", "--set", "budget.n=2000")
    assert "PASS      mid-8b" in out and "budget: mid-8b" not in out  # decided with the larger budget
