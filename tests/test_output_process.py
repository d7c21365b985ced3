"""The output process (orchestrator/outputs/output_process.py): a job on a recorded table in a fresh interpreter leaves
MLflow (tracked) or matplotlib (untracked) to a process of its own, and what that process writes is what this one
writes: the same runs, parameters, every step of every metric, tags, artifacts, and the same plot files to the byte."""

import json
import pathlib
import subprocess
import sys

import matplotlib  # noqa: F401  (imported here: this process's jobs draw and log in-process, the reference)
import mlflow  # noqa: F401
import mlflow.tracking
import pytest

from certsel.config import load_config, parse_config
from certsel.orchestrator.outputs.output_process import OutputProcess, OutputProcessError, outputs_for
from helpers.mlflow_record import job_record

pytestmark = pytest.mark.integration

JOB = ("examples/gate_recovery.yaml", ["candidates=[mx_m5_r2_k16,mx_m7_r4_k16,mx_m4_r8_k64]", "budget.n=300",
                                       "ray.num_cpus=2"])

# a fresh interpreter running one job, saying which heavy modules it imported itself; "in-process": it imports both
# first, so that its job logs and draws in-process (the reference: a fresh interpreter too, so that nothing a long test
# process did before is part of the comparison)
SCRIPT = """
import json, sys
if sys.argv[4] == "in-process":
    import matplotlib, mlflow
from certsel.config import load_config, parse_config
from certsel.orchestrator.commands.job import execute
cfg = load_config(sys.argv[1], json.loads(sys.argv[2]))
result, run_id = execute(cfg, track=sys.argv[3] == "track")
print(json.dumps({"run_id": run_id, "folder": str(result.output_dir),
                  "imported": sorted(m for m in ("mlflow", "matplotlib") if m in sys.modules)}))
"""


def _sets(tmp_path, name, uri=None):
    home = tmp_path / name
    home.mkdir()
    return [*JOB[1], f"state.dir={home / 'jobs'}", f"state.store={home / 'labels.db'}",
            *([f"tracking.uri={uri}"] if uri else [])]


def _fresh_interpreter(sets, track: bool, in_process: bool = False) -> dict:
    p = subprocess.run([sys.executable, "-c", SCRIPT, JOB[0], json.dumps(sets), "track" if track else "no",
                        "in-process" if in_process else "own process"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _plots(folder) -> dict:
    import pathlib

    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).glob("*.png"))}


def test_a_tracked_job_logs_through_its_own_process_the_runs_logged_in_process(tmp_path):
    uri_there, uri_here = (f"sqlite:///{tmp_path}/{n}.db" for n in ("there", "here"))
    there = _fresh_interpreter(_sets(tmp_path, "there", uri_there), track=True)
    assert there["imported"] == ["matplotlib"]  # MLflow was the output process's alone; the plots drawn here
    here = _fresh_interpreter(_sets(tmp_path, "here", uri_here), track=True, in_process=True)
    a, b = job_record(uri_there, there["run_id"], tags=True), job_record(uri_here, here["run_id"], tags=True)
    assert a == b
    assert len(a[1]) == 3 and a[0][1]["labels_human"] and a[1][0][1]["log_evalue_path"]  # not vacuous
    assert {"report.html", "selection.json", "bounds.png"} <= set(a[2])
    assert _plots(there["folder"]) == _plots(here["folder"]) != {}


def test_an_untracked_job_draws_its_plots_in_its_own_process_the_same_bytes(tmp_path):
    there = _fresh_interpreter(_sets(tmp_path, "there"), track=False)
    assert there["imported"] == []  # matplotlib was the output process's alone
    here = _fresh_interpreter(_sets(tmp_path, "here"), track=False, in_process=True)
    assert _plots(there["folder"]) == _plots(here["folder"])
    assert set(_plots(here["folder"])) == {"bounds.png", "evalue_paths.png"}


def test_only_a_recorded_table_gets_one_and_only_where_it_pays(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "matplotlib")  # as in a fresh interpreter (the module stays imported)
    table = load_config(JOB[0], _sets(tmp_path, "t"))
    process = outputs_for(table, track=False)
    try:
        assert isinstance(process, OutputProcess)
        process.close()
        process.close()  # closing twice is closing once
        assert outputs_for(table, track=True) is process  # it waits for this interpreter's next job, warm
    finally:
        process.end()
    assert not process.alive
    assert outputs_for(table, track=True) is None  # MLflow is imported here: nothing to take off the job's path
    live = parse_config({"live": {"items": "examples/data/single_digit_additions.jsonl", "loss": "numeric",
                                  "candidates": [{"id": "a", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                  "template": "{question} ="}]},
                         "policy": {"kind": "r-eval"}, "procedure": "gate"})
    assert outputs_for(live, track=False) is None  # model calls: its runs are logged as it goes, here


def test_an_error_there_is_raised_here_and_a_dead_process_is_named(tmp_path):
    process = OutputProcess(f"sqlite:///{tmp_path}/missing/dir/store.db")
    try:
        process.open_store(f"sqlite:///{tmp_path}/missing/dir/store.db", "certsel")
        with pytest.raises(Exception, match="does not exist"):
            process.tracker()
    finally:
        process.end()
    process = OutputProcess(None)
    process._proc.kill()
    process._proc.wait()
    with pytest.raises(OutputProcessError, match="output process ended"):
        process.call("plots", None, tmp_path)
    process.close()


TWO_JOBS = """
import json, sys
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs import output_process
pids, runs = [], []
for seed in (0, 1):
    cfg = load_config(sys.argv[1], [*json.loads(sys.argv[2]), f"seed={seed}"])
    result, run_id = execute(cfg, track=True)
    pids.append([p._proc.pid for p in output_process._IDLE])
    runs.append(run_id)
print(json.dumps({"pids": pids, "runs": runs, "mlflow": "mlflow" in sys.modules}))
"""


def test_a_second_job_of_one_interpreter_takes_the_first_jobs_process(tmp_path):
    """A notebook's second job: the process the first one used waits, warm, and logs the second's runs too."""
    uri = f"sqlite:///{tmp_path}/store.db"
    p = subprocess.run([sys.executable, "-c", TWO_JOBS, JOB[0], json.dumps(_sets(tmp_path, "two", uri))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(out["pids"][0]) == 1 and out["pids"][0] == out["pids"][1] and not out["mlflow"]
    for run_id in out["runs"]:
        assert job_record(uri, run_id)[1]  # both jobs' runs, with their candidates'


TWO_HOMES = """
import json, os, sys
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs import output_process
pids, runs = [], []
for home in sys.argv[3:]:
    os.environ["CERTSEL_HOME"] = home  # as a notebook or a test process changes it between jobs
    cfg = load_config(sys.argv[1], json.loads(sys.argv[2]))
    result, run_id = execute(cfg, track=True)
    pids.append([p._proc.pid for p in output_process._IDLE])
    runs.append(run_id)
print(json.dumps({"pids": pids, "runs": runs}))
"""


def test_a_waiting_process_logs_a_later_job_to_the_store_of_that_jobs_home(tmp_path):
    """The default store (no tracking.uri) is resolved where the job runs: a process started for a job under one
    $CERTSEL_HOME logs the next job, under another, to that one's store (it once logged it to the first's)."""
    homes = [tmp_path / "first", tmp_path / "second"]
    sets = JOB[1]  # the job folder, the ledger and the store: each home's defaults
    p = subprocess.run([sys.executable, "-c", TWO_HOMES, JOB[0], json.dumps(sets), *map(str, homes)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(out["pids"][0]) == 1 and out["pids"][0] == out["pids"][1]  # one process for both jobs
    for home, run_id in zip(homes, out["runs"], strict=True):
        assert job_record(f"sqlite:///{home / 'mlruns.db'}", run_id)[1]


PLUGIN = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from certsel.policies import BettingState, BettingStrategy, register_strategy
from certsel.policies.procedures import Procedure, register_procedure


@register_strategy
@dataclass(frozen=True)
class HalfBet(BettingStrategy):
    name: ClassVar[str] = "half-output-test"

    def fractions(self, q, alpha, scale, state, *, delta, horizon):
        return np.full(q.shape, 0.5), BettingState(state.count + q.shape[-1])


@register_procedure
class HalfFirst(Procedure):
    name = "half-first-output-test"

    def candidate_deltas(self, delta, K):
        w = np.full(K, 0.5 / (K - 1))
        w[0] = 0.5
        return delta * w

    def certified(self, max_log_e, delta):
        return max_log_e >= -np.log(self.candidate_deltas(delta, max_log_e.shape[-1]))

    def level(self, delta, K):
        return "delta/2 to the first, the rest shared"
'''


def test_a_plugins_procedure_and_bet_are_logged_by_the_output_process(tmp_path):
    """The runs name what the job's plugins registered: the output process imports them before it logs."""
    import os
    import shutil

    import yaml

    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    uri = f"sqlite:///{tmp_path}/store.db"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({
        "plugins": ["my_plugin"], "data": {"path": str(pathlib.Path(JOB[0]).resolve().parent / "data" /
                                                       "triviaqa_llama31_8b_mx.parquet"),
                                           "judge": "loss_judge_best", "order": "rank"},
        "candidates": ["mx_m10_r8_k16", "mx_m8_r8_k16", "mx_m6_r8_k16"],
        "policy": {"kind": "r-eval", "betting": {"kind": "half-output-test"}}, "procedure": "half-first-output-test",
        "objective": {"column": "avg_bitwidth"}, "budget": {"n": 100, "batch": 50},
        "tracking": {"uri": uri}, "state": {"dir": str(tmp_path / "jobs"), "store": str(tmp_path / "labels.db")}}))
    certsel = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
    p = subprocess.run([certsel, "run", "job.yaml", "--no-progress", "--json", "out.json"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "CERTSEL_HOME": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    client = mlflow.tracking.MlflowClient(uri)
    (job_run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                    "tags.`certsel.kind` = 'job'")
    params = job_record(uri, job_run.info.run_id)[0][0]
    assert params["procedure"] == "half-first-output-test" and params["betting"].startswith("half-output-test")


def test_a_process_started_before_the_job_file_is_read_is_taken_or_ended(tmp_path, monkeypatch):
    """The command line's prestart: a table job takes the process; a job whose labels take long ends it at once."""
    from certsel.orchestrator.outputs import output_process

    monkeypatch.delitem(sys.modules, "matplotlib")  # as in a fresh interpreter (the module stays imported)
    table = load_config(JOB[0], _sets(tmp_path, "t"))
    live = parse_config({"live": {"items": "examples/data/single_digit_additions.jsonl", "loss": "numeric",
                                  "candidates": [{"id": "a", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                  "template": "{question} ="}]},
                         "policy": {"kind": "r-eval"}, "procedure": "gate"})
    output_process.prestart(track=False)
    early = output_process._IDLE[-1]
    assert early.prestarted and early.alive
    assert outputs_for(live, track=False) is None
    assert not early.alive and early not in output_process._IDLE  # ended: nothing imports beside the live job
    output_process.prestart(track=False)
    early = output_process._IDLE[-1]
    try:
        assert outputs_for(table, track=False) is early and not early.prestarted
    finally:
        early.end()
