"""Crash safety: the durable label log, a candidate actor killed with SIGKILL mid-run, and
the driver process killed with SIGKILL then resumed; real Ray, real MLflow, a real HTTP
model server (tests/helpers/servers.py, slowed down so that the kills land mid-run)."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
from certsel.workers.contracts import Pid
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.engine.state import CHECKPOINT, JobState, StateProblem
from certsel.workers.labellog import LabelLog, LoggedSource, log_path, unpack
from certsel.workers.replay import ReplaySource
from mlflow.tracking import MlflowClient
from helpers.servers import adder_server
from helpers.jobs import assert_same_outcome, logged_labels, no_duplicates, wait_for, write_job

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

CERTSEL = [sys.executable, "-m", "certsel.cli"]


# -- the log itself ------------------------------------------------------------------------


def test_label_log_is_durable_unique_and_path_safe(tmp_path):
    name = "../../etc/passwd\x00weird/name"
    path = log_path(tmp_path, name)
    assert path.parent == tmp_path / "labels" and path.suffix == ".db"  # a hash, never the name
    src = ReplaySource(np.linspace(0, 1, 10), np.linspace(1, 0, 10))
    logged = LoggedSource(src, LabelLog(path, name))
    np.testing.assert_array_equal(logged.human([3, 1, 3]), src._human[[3, 1, 3]])
    logged.judge([1, 2])
    assert (logged.human_labels, logged.judge_labels, logged.requests) == (2, 2, 2 + 1 + 2)
    logged.log.close()

    # reopened (a restarted actor): the labels are there, nothing is bought again; the
    # counters follow the rows the candidate has used (a prefix of the log)
    fresh = ReplaySource(np.full(10, 9.0), np.full(10, 9.0))  # a source that would answer differently
    again = LoggedSource(fresh, LabelLog(path, name))
    assert (again.human_labels, again.judge_labels, again.requests) == (0, 0, 0)
    np.testing.assert_array_equal(again.human([3, 1]), [src._human[3], src._human[1]])
    assert fresh.requests == 0 and (again.human_labels, again.requests) == (2, 2)
    again.judge([1, 2])
    assert fresh.requests == 0 and (again.human_labels, again.judge_labels, again.requests) == (2, 2, 5)
    again.judge([3])  # item 3 was generated before the restart: only the judge call is new
    assert fresh.requests == 1 and again.requests == 6
    rows = again.log.rows()
    assert rows.role.tolist() == ["human", "human", "judge", "judge", "judge"] and rows.item.tolist() == [3, 1, 1, 2, 3]
    assert rows.human_items().tolist() == [3, 1] and rows.human_items(1).tolist() == [3]
    with sqlite3.connect(path) as con:  # (role, item) is unique in the file itself
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("insert into labels (role, item, loss, requests) values ('human', 3, 0.5, 0)")
    with pytest.raises(ValueError, match="label log of"):
        LabelLog(path, "another candidate")


def test_job_state_resume_rules(tmp_path):
    a = JobState.open(tmp_path, "f" * 24)
    with pytest.raises(StateProblem, match="running in another process"):
        JobState.open(tmp_path, "f" * 24, resume=a.job_id)
    assert JobState.open(tmp_path, "f" * 24).job_id != a.job_id  # a locked job is not resumed automatically
    a.update(status="failed")
    a.release()
    with pytest.raises(StateProblem, match="different configuration"):
        JobState.open(tmp_path, "0" * 24, resume=a.job_id)
    with pytest.raises(StateProblem, match="no job 123abc"):
        JobState.open(tmp_path, "f" * 24, resume="123abc")
    with pytest.raises(StateProblem, match="is not a job id"):
        JobState.open(tmp_path, "f" * 24, resume="../x")
    b = JobState.open(tmp_path, "f" * 24, resume=a.job_id)
    assert b.job_id == a.job_id and b.resumed and b.meta["attempts"] == 2
    b.update(status="finished")
    b.release()
    with pytest.raises(StateProblem, match="already finished"):
        JobState.open(tmp_path, "f" * 24, resume=a.job_id)


# -- kills ---------------------------------------------------------------------------------


def past_snapshot(job_dir) -> int | None:
    """The pid of a host one of whose candidates has a snapshot and has bought labels
    since (so the driver has received the step the snapshot was taken at), else None."""
    hosts = job_dir / "hosts"
    for f in hosts.iterdir() if hosts.is_dir() else ():
        for name in f.read_text().split(","):
            try:
                with sqlite3.connect(f"file:{log_path(job_dir, name)}?mode=ro", uri=True, timeout=5) as con:
                    row = con.execute("select state from snapshots order by steps desc").fetchone()
                    rows = con.execute("select count(*) from labels").fetchone()[0]
            except sqlite3.Error:
                continue
            if row is not None and rows > unpack(row[0])["log_used"]:
                return int(f.name)
    return None


def test_actor_killed_mid_run_is_rebuilt_from_the_log(ray_session, tmp_path):
    with adder_server() as (url, srv):
        (tmp_path / "ref").mkdir()
        (tmp_path / "kill").mkdir()
        ref_cfg = load_config(write_job(tmp_path / "ref", url))
        ref_rt = RayRuntime()
        ref = run_job(ref_cfg, load_job_data(ref_cfg), ref_rt, job_dir=tmp_path / "ref" / "job")
        ref_rt.close()

        srv.delay = 0.03
        cfg = load_config(write_job(tmp_path / "kill", url))
        # snapshots every 2 steps here (none in the reference): the rebuilt host starts from one
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"snapshot_every": 2})})
        runtime = RayRuntime()
        runtime.ensure_hosts(2)
        pids = [runtime.call(h, Pid()) for h in range(2)]
        job_dir = tmp_path / "kill" / "job"
        out = {}
        thread = threading.Thread(target=lambda: out.update(res=run_job(cfg, load_job_data(cfg), runtime,
                                                                         n_hosts=2, job_dir=job_dir)))
        thread.start()
        target = {}
        wait_for(lambda: target.update(pid=past_snapshot(job_dir)) or target["pid"] is not None)
        os.kill(target["pid"], signal.SIGKILL)
        thread.join(timeout=600)
        assert not thread.is_alive()
        host = pids.index(target["pid"])
        assert runtime.call(host, Pid()) != pids[host]  # the killed host is a new process
        res = out["res"]
        runtime.close()
    assert logged_labels(job_dir) < 10_000  # sanity: the log is the job's
    assert res.recovered.hosts >= 1 and res.recovered.steps_from_snapshots >= 2
    assert_same_outcome(ref.records, res.records)
    assert res.certified == ref.certified and res.selected == ref.selected
    no_duplicates(res.labels)
    for name in ref.labels:  # the same labels, in the same order
        np.testing.assert_array_equal(res.labels[name].item, ref.labels[name].item)
        np.testing.assert_array_equal(res.labels[name].loss, ref.labels[name].loss)


def test_driver_killed_mid_run_then_resumed(tmp_path):
    with adder_server() as (url, srv):
        for d in ("ref", "kill"):
            (tmp_path / d).mkdir()
            path = write_job(tmp_path / d, url)
            job = yaml.safe_load(path.read_text())
            job["state"] = {"snapshot_every": 1, "dir": ".certsel-jobs"}  # a checkpoint after every round, beside the job
            path.write_text(yaml.safe_dump(job))
        ref = subprocess.run([*CERTSEL, "run", "job.yaml", "--no-progress", "--json", "sel.json"],
                             cwd=tmp_path / "ref", capture_output=True, text=True, timeout=600)
        assert ref.returncode == 0, ref.stderr

        srv.delay = 0.03
        kill_dir = tmp_path / "kill"
        proc = subprocess.Popen([*CERTSEL, "run", "job.yaml", "--no-progress"], cwd=kill_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        assert first.startswith("job ") and "labels kept in" in first, first
        job_id = first.split()[1].rstrip(":")
        job_dir = kill_dir / ".certsel-jobs" / job_id
        wait_for(lambda: (job_dir / CHECKPOINT).exists(), timeout=300)  # killed after round 1 or later
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        before = logged_labels(job_dir)
        meta = json.loads((job_dir / "job.json").read_text())
        assert meta["status"] == "running"  # the killed driver could not say otherwise

        srv.delay = 0.0
        res = subprocess.run([*CERTSEL, "run", "job.yaml", "--no-progress", "--json", "sel.json",
                              "--report-dir", "report"], cwd=kill_dir, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"resuming job {job_id} (attempt 2)"), res.stdout
    assert "resumed from round " in res.stdout and "no label bought twice" in res.stdout
    a = json.loads((tmp_path / "ref" / "sel.json").read_text())
    b = json.loads((kill_dir / "sel.json").read_text())
    assert b["job_id"] == job_id and b["certified_set"] == a["certified_set"] and b["selected"] == a["selected"]
    assert a["resume"] is None and b["resume"]["from_round"] >= 1  # from the driver checkpoint and snapshots
    assert b["resume"]["steps_from_snapshots"] >= 3
    for x, y in zip(a["candidates"], b["candidates"], strict=True):
        assert (x["status"], x["labels_human"], x["labels_judge"]) == (y["status"], y["labels_human"], y["labels_judge"])
        assert x["log_e_value"] == pytest.approx(y["log_e_value"], abs=1e-9)
    assert b["labels"]["spent"]["human"] == a["labels"]["spent"]["human"]
    log = pq.read_table(kill_dir / "report" / "labels.parquet").to_pandas()
    assert not log.duplicated(["candidate", "item", "role"]).any()
    assert len(log) == logged_labels(job_dir) >= before
    # MLflow: the killed attempt's runs are KILLED, the resumed one FINISHED
    client = MlflowClient(f"sqlite:///{kill_dir}/store.db")
    exp = client.get_experiment_by_name("certsel")
    parents = client.search_runs([exp.experiment_id], "tags.`certsel.kind` = 'job'")
    assert sorted(r.info.status for r in parents) == ["FINISHED", "KILLED"]
    assert {r.data.tags["certsel.job_id"] for r in parents} == {job_id}
    assert json.loads((job_dir / "job.json").read_text())["status"] == "finished"


def test_candidate_names_cannot_escape_the_job(ray_session, tmp_path):
    """Names that look like paths stay names: every file the job writes is inside its folders."""
    import pyarrow as pa

    from certsel.config import parse_config
    from certsel.orchestrator.commands.job import execute

    names = ["../../escape", "/abs/olute", "a/../../b", "..", "naïve ✓"]
    rng = np.random.default_rng(0)
    I = 50
    pq.write_table(pa.table({"candidate": np.repeat(names, I), "item": np.tile(np.arange(I), len(names)),
                             "loss_human": (rng.random(len(names) * I) < 0.1).astype(float),
                             "size": np.repeat(np.arange(len(names), dtype=float), I)}), tmp_path / "t.parquet")
    work = tmp_path / "work"
    work.mkdir()
    cfg = parse_config({"data": {"path": str(tmp_path / "t.parquet")}, "policy": {"kind": "r-eval"},
                        "alpha": 0.3, "procedure": "bonferroni", "objective": {"column": "size"},
                        "budget": {"n": 40, "batch": 20}, "tracking": {"uri": f"sqlite:///{work}/s.db"},
                        "state": {"dir": str(work / "jobs")}})
    before = {p for p in tmp_path.parent.rglob("*")}
    result, run_id = execute(cfg, output=work / "report")
    assert sorted(r.name for r in result.records) == sorted(names)
    new = {p for p in tmp_path.parent.rglob("*")} - before
    assert new and all(work in p.parents for p in new), sorted(str(p) for p in new if work not in p.parents)
    assert len(list((work / "jobs").glob("*/labels/*.db"))) == len(names)


def _as_a_terminal() -> None:
    """In the child before it runs: SIGINT at its default and unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_prints_the_resume_command(tmp_path):
    """Ctrl-C (SIGINT) mid-job: exit 130, one line that says how to resume, and that very
    command resumes the job (its labels are not bought again) and finishes."""
    with adder_server() as (url, srv):
        path = write_job(tmp_path, url)
        srv.delay = 2.0  # each round takes seconds: the job is still running 3 s in, on any machine
        # without futility stops the weak templates run to their budget: the job is still running at the signal
        # --fresh: a finished job of the same identity in the shared home is never shown instead
        # the command starts as a terminal starts it, with Ctrl-C at its default and not blocked: a test process may
        # hand its children an ignored or blocked SIGINT (in two clean-clone CI runs this test's child finished
        # with exit 0 and said nothing, as a process that never saw the signal does)
        here = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
        proc = subprocess.Popen([*CERTSEL, "run", "job.yaml", "--no-progress", "--fresh", "--set", "seed=3", "--set",
                                 "scheduling.futility=null"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_terminal)
        first = proc.stdout.readline()
        job_id = first.split()[1].rstrip(":")
        deadline = time.monotonic() + 120
        while not sum(srv.calls.values()) and time.monotonic() < deadline:  # wait for the first answer: rounds run
            time.sleep(0.05)
        assert sum(srv.calls.values()), "the job asked the server nothing"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, f"{err} (this test process: SIGINT handler {here[0]}, blocked {here[1]})"
        line = err.strip().splitlines()[-1]
        assert line.startswith("certsel: interrupted (runs marked KILLED); resume with: certsel run ")
        resume = line.split("resume with: ", 1)[1]
        assert resume == f"certsel run {path.name} --set seed=3 --set scheduling.futility=null --resume {job_id}"
        srv.delay = 0.0
        again = subprocess.run([*CERTSEL, *resume.split()[1:], "--no-progress"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=600)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"resuming job {job_id}") and "selected:" in again.stdout
