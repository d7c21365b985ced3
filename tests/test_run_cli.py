"""``certsel run`` / ``certsel show`` as a user runs them (real subprocesses, Ray, MLflow)."""

import json
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

from helpers.cli import CERTSEL, EXAMPLES, job_file, n_runs, run, small_table  # noqa: E402

def test_quantization_example_and_show(tmp_path):
    """The README's main command (smaller budget), then `certsel show` on its run."""
    out = tmp_path / "sel.json"
    p = run("run", str(EXAMPLES / "quantization.yaml"), "--set", "budget.n=100", "--set",
            f"tracking.uri=sqlite:///{tmp_path}/store.db", "--set", f"state.dir={tmp_path}/jobs", "--json", str(out),
            "--no-progress")
    assert p.returncode == 0, p.stderr
    assert "selected: mx_" in p.stdout and "saved" in p.stdout
    cert = json.loads(out.read_text())
    run_id = p.stdout.split("MLflow run: ")[1].split()[0]
    s = run("show", run_id, "--tracking-uri", f"sqlite:///{tmp_path}/store.db", "--json")
    assert s.returncode == 0, s.stderr
    shown = json.loads(s.stdout)
    assert shown["selected"] == cert["selected"] and shown["certified_set"] == cert["certified_set"]
    # the 48 configs: those the sequence tested from the pilot's start, and those before it
    assert len(shown["candidates"]) + len(shown["pilot"]["skipped"]) == 48 and shown["pilot"]["skipped"]
    s = run("show", run_id[:8], "--tracking-uri", f"sqlite:///{tmp_path}/store.db")  # the prefix the CLI prints
    assert s.returncode == 0 and f"selected: {cert['selected']}" in s.stdout
    assert f"certsel show {run_id[:8]}" in p.stdout and "MLflow UI: mlflow ui --backend-store-uri" in p.stdout
    # the link opens the runs table, not MLflow 3's GenAI overview (docs/img/mlflow_run.png)
    assert f"/#/experiments/1/runs/{run_id}?workflowType=machine_learning" in p.stdout


def _assert_bad(p, match, tmp_path, runs=0):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("certsel: error: "), p.stderr
    assert match in lines[0], lines[0]
    assert n_runs(tmp_path) == runs  # no half-written run (and no finished one)


@pytest.mark.parametrize("case, match", [
    ("missing column", "missing column 'loss_humn'"),
    ("loss out of range", "outside [0.0, 1.0]"),
    ("unknown in order", "order: unknown candidate(s) not in the data: mx_m1_r1_k1 (did you mean 'mx_m10_r8_k16'?)"),
    ("duplicate ids", "duplicate candidate ids: mx_m8_r8_k16"),
    ("empty data", "has no rows"),
    ("unknown key", "unknown key 'budget.human'"),
    ("bad value", "alpha: Input should be less than 1"),
    ("holm with seq", "procedure 'holm' needs e-values"),
    ("budget too large", "items needed per candidate but the table has 200"),
])
def test_bad_input_is_one_line_exit_2_and_no_run(tmp_path, case, match):
    over = {
        "missing column": {"data": {"human": "loss_humn"}},
        "unknown in order": {"order": ["mx_m10_r8_k16", "mx_m1_r1_k1", "mx_m8_r8_k16"]},
        "duplicate ids": {"candidates": ["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m8_r8_k16"]},
        "unknown key": {"budget": {"human": 3}},
        "bad value": {"alpha": 1.5},
        "holm with seq": {"procedure": "holm", "policy": {"kind": "seq"}},
        "budget too large": {"budget": {"n": 100}},
    }.get(case, {})
    path = job_file(tmp_path, **over)
    if case == "loss out of range":
        small_table(tmp_path / "t.parquet", loss=1.5)
    if case == "empty data":
        small_table(tmp_path / "t.parquet", rows=False)
    _assert_bad(run("run", str(path)), match, tmp_path)


def test_unreachable_ray_address(tmp_path):
    path = job_file(tmp_path, ray={"address": "127.0.0.1:9"})
    p = run("run", str(path))
    _assert_bad(p, "Ray cluster at 127.0.0.1:9 is unreachable", tmp_path)


def test_unreachable_ray_address_from_environment(tmp_path):
    path = job_file(tmp_path)
    env_run = subprocess.run([CERTSEL, "run", str(path)], capture_output=True, text=True, timeout=120,
                             env={**__import__("os").environ, "RAY_ADDRESS": "127.0.0.1:9"})
    _assert_bad(env_run, "unreachable", tmp_path)


def test_unwritable_tracking_uri(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    path = job_file(tmp_path, tracking={"uri": f"sqlite:///{blocker}/store.db"})
    _assert_bad(run("run", str(path)), "does not exist", tmp_path)


def test_show_unknown_run_and_a_missing_store(tmp_path):
    job_file(tmp_path)
    p = run("show", "0123456789abcdef", "--tracking-uri", f"sqlite:///{tmp_path}/store.db")
    assert p.returncode == 2 and "no tracking store at" in p.stderr and not (tmp_path / "store.db").exists()
    # no such job in certsel's home, whose store does not exist yet: one line naming it, no file created
    home = tmp_path / "home"
    p = subprocess.run([CERTSEL, "show", "0123456789abcdef"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CERTSEL_HOME": str(home)})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and not (home / "mlruns.db").exists()
    assert f"no tracking store at {home / 'mlruns.db'}" in p.stderr and not (tmp_path / "mlruns.db").exists()


def test_bare_key_value_arguments_get_a_hint(tmp_path):
    p = run("run", str(job_file(tmp_path)), "budget.n=100")
    assert p.returncode == 2 and "write --set KEY=VALUE" in p.stderr and p.stderr.count("\n") == 1


def test_bad_override_and_missing_config(tmp_path):
    path = job_file(tmp_path)
    _assert_bad(run("run", str(path), "--set", "budget.n"), "is not KEY=VALUE", tmp_path)
    _assert_bad(run("run", str(tmp_path / "nope.yaml")), "config file not found", tmp_path)


def test_small_job_runs_and_tracks(tmp_path):
    path = job_file(tmp_path, budget={"n": 40, "r": 3, "batch": 10})
    p = run("run", str(path), "--no-progress", "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert n_runs(tmp_path) == 4
    with sqlite3.connect(tmp_path / "store.db") as con:
        assert {s for (s,) in con.execute("select status from runs")} == {"FINISHED"}


def test_joins_a_running_ray_cluster_via_ray_address(tmp_path):
    """The `ray job submit` path: the job's driver finds its cluster in RAY_ADDRESS. The
    cluster is a real `ray start --head --block` process, stopped with SIGTERM (which stops
    only the processes it started, not other Ray sessions on the machine)."""
    import os
    import socket
    import time

    ray_cli = str(pathlib.Path(sys.executable).parent / "ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=os.urandom(16).hex())  # the cluster and its clients share it
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline and head.poll() is None, "ray start --head did not come up"
                time.sleep(0.5)
        path = job_file(tmp_path)
        p = subprocess.run([CERTSEL, "run", str(path), "--no-progress", "--quiet"], capture_output=True, text=True,
                           timeout=300, env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"})
        assert p.returncode == 0, p.stderr
        assert "selected:" in p.stdout
        assert n_runs(tmp_path) == 4
    finally:
        head.terminate()
        head.wait(timeout=120)
