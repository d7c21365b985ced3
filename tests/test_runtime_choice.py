"""The runtime a job gets (orchestrator/engine/runtime_choice.py): auto's choice for each kind of job with its one-line
reason, and the same certificate and label log under the in-process runtime and a real Ray, for a selection, a gate, a
ranking and a job killed in-process and resumed on Ray."""

import json
import pathlib
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from certsel.config import load_config, parse_config
from certsel.errors import InputError
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.engine.runtime_choice import RuntimeKind, choose_runtime
from certsel.orchestrator.outputs.certificate import certificate_of
from helpers.mlflow_record import job_record

TABLE = "examples/data/triviaqa_llama31_8b_mx.parquet"


def _table_job(**more):
    return parse_config({"data": {"path": TABLE, "human": "loss_human"}, "policy": {"kind": "r-eval"},
                         "procedure": "gate", **more})


def test_auto_runs_a_table_in_process_and_models_or_a_cluster_on_ray(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    table = choose_runtime(_table_job())
    assert table.kind is RuntimeKind.LOCAL
    assert table.line() == ("runtime: in-process (a recorded table: its labels are lookups, nothing runs long enough "
                            "in parallel to pay for starting Ray; --runtime ray runs it on Ray)")
    live = parse_config({"live": {"items": "examples/data/single_digit_additions.jsonl", "loss": "numeric",
                                  "candidates": [{"id": "a", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                  "template": "{question} ="}]},
                         "policy": {"kind": "r-eval"}, "procedure": "gate"})
    assert choose_runtime(live).kind is RuntimeKind.RAY
    assert "the live source's labels come from model calls" in choose_runtime(live).line()
    lm = parse_config({"labels": {"kind": "lm-eval", "task": "t", "candidates": [
        {"id": "a", "model": "local-completions", "model_args": "base_url=http://127.0.0.1:9/v1,model=m"}]},
        "policy": {"kind": "r-eval"}, "procedure": "gate"})
    assert choose_runtime(lm).kind is RuntimeKind.RAY
    assert choose_runtime(_table_job(runtime="ray")).reason == "runtime: ray asked"
    assert choose_runtime(_table_job(ray={"address": "10.0.0.1:6379"})).line().startswith(
        "runtime: Ray (a Ray cluster is named (ray.address: 10.0.0.1:6379)")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert choose_runtime(_table_job()).kind is RuntimeKind.RAY
    with pytest.raises(InputError, match=r"runtime: local: a Ray cluster is named \(RAY_ADDRESS: ray://head:10001\)"):
        choose_runtime(_table_job(runtime="local"))


def test_local_where_only_ray_serves_is_bad_input_naming_why():
    job = load_config("examples/live_templates.yaml", ["runtime=local"])
    with pytest.raises(InputError, match=r"^runtime: local: the job starts its own model servers \(live.serve\)"):
        choose_runtime(job)


def _same(a, b) -> None:
    """Two certificates of one job run twice (or their JSON), less what differs between any two runs (ids, times,
    folders)."""
    drop = ("created", "seconds", "job_id", "ledger", "resume")
    x, y = ({k: v for k, v in json.loads(json.dumps(c if isinstance(c, dict) else c.as_json())).items()
             if k not in drop} for c in (a, b))
    assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)


FRESH = """
import json, sys
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
result, run_id = execute(load_config(sys.argv[1], json.loads(sys.argv[2])), track=sys.argv[3] == "track")
print(json.dumps({"folder": str(result.output_dir), "run_id": run_id}))
"""


def _run_fresh(path, sets, tmp_path, runtime, uri=None) -> dict:
    """The job in a fresh interpreter (nothing a long test process did before is part of the comparison): its folder
    and run id."""
    home = tmp_path / runtime
    home.mkdir(parents=True, exist_ok=True)
    sets = [*sets, f"runtime={runtime}", f"state.dir={home / 'jobs'}", f"state.store={home / 'labels.db'}", *PACKING,
            *([f"tracking.uri={uri}"] if uri else [])]
    p = subprocess.run([sys.executable, "-c", FRESH, path, json.dumps(sets), "track" if uri else "no"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _run(path, sets, tmp_path, runtime, home=None, **kw):
    home = tmp_path / (home or runtime)
    home.mkdir(parents=True, exist_ok=True)
    cfg = load_config(path, [*sets, f"runtime={runtime}", f"state.dir={home / 'jobs'}",
                             f"state.store={home / 'labels.db'}", *PACKING])
    result, _ = execute(cfg, track=False, **kw)
    return result


# the CPUs both runtimes pack their hosts by, named: Ray counts a container's CPU quota, os.cpu_count() may not, and
# a different packing rounds the last bit of a vectorised block differently (LocalRuntime.like_ray)
PACKING = ["ray.num_cpus=2"]

CASES = {
    "selection": ("examples/quantization.yaml", ["budget.n=100"]),
    "gate": ("examples/gate_recovery.yaml", ["candidates=[mx_m5_r2_k16,mx_m7_r4_k16,mx_m4_r8_k64]", "budget.n=300"]),
    "ranking": ("examples/alpacaeval_ranking.yaml", ["budget.n=150"]),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_the_certificate_and_labels_are_the_same_in_process_and_on_ray(case, tmp_path):
    path, sets = CASES[case]
    local = pathlib.Path(_run_fresh(path, sets, tmp_path, "local")["folder"])
    ray = _run(path, sets, tmp_path, "ray")
    assert "starting Ray" in ray.stages
    _same(json.loads((local / "selection.json").read_text()), certificate_of(ray))
    a, b = (pq.read_table(folder / "labels.parquet") for folder in (local, ray.output_dir))
    assert a.num_rows > 0 and a.equals(b)


class _Killed(Exception):
    pass


@pytest.mark.integration
def test_a_job_killed_in_process_resumes_on_ray_to_the_same_certificate(tmp_path):
    path, sets = CASES["selection"]
    whole = _run(path, sets, tmp_path / "whole", "local")
    jobs = []

    def kill(records, n):
        if n >= 2:
            raise _Killed

    with pytest.raises(Exception):
        _run(path, [*sets, "state.snapshot_every=1"], tmp_path, "local", "killed", progress=kill, on_job=jobs.append)
    resumed = _run(path, [*sets, "state.snapshot_every=1"], tmp_path, "ray", "killed", resume=jobs[0].job_id)
    assert resumed.resume is not None and resumed.resume.from_round >= 2
    _same(certificate_of(whole), certificate_of(resumed))


@pytest.mark.integration
def test_the_mlflow_runs_are_the_same_in_process_and_on_ray(tmp_path):
    """The tracking record of one gate under each runtime: the same parameters, the same metrics (every step of each
    candidate's e-value and labels) and the same child runs, less ids, times and folders."""
    path, sets = CASES["gate"]
    records = {}
    for runtime in ("local", "ray"):  # the local one in a fresh interpreter (its Ray side starts actors anyway)
        uri = f"sqlite:///{tmp_path}/{runtime}.db"
        if runtime == "local":
            run_id = _run_fresh(path, sets, tmp_path, runtime, uri)["run_id"]
        else:
            home = tmp_path / runtime
            home.mkdir()
            cfg = load_config(path, [*sets, f"runtime={runtime}", f"state.dir={home / 'jobs'}",
                                     f"state.store={home / 'labels.db'}", f"tracking.uri={uri}", *PACKING])
            _, run_id = execute(cfg, track=True)
        records[runtime] = job_record(uri, run_id)
    assert records["local"] == records["ray"]
    assert records["local"][1] and records["local"][0][1]  # not vacuous: child runs and metric histories

