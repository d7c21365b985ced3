"""certsel starting its own model servers (``live.serve``): real child processes, real
HTTP, real Ray actors, real MLflow.

The server program here is tests/helpers/servers.py run as a process with the arguments certsel
gives ``vllm serve`` (the real vLLM is started the same way by the ``vllm`` marker test):
what is tested is the process management, readiness, URL wiring, failure paths and
clean-up, plus Cer-Eval on live items with features from ``/v1/embeddings``.
"""

import json
import os
import pathlib
import subprocess
import sys

import httpx
import numpy as np
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from helpers.policies import cer_eval_direct
from certsel.workers.serving import ModelServer, ServeError
from mlflow.tracking import MlflowClient

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, HTTP servers or the CLI)

TESTS = str(pathlib.Path(__file__).resolve().parent)
STAND_IN = {"python": sys.executable, "module": "helpers.servers", "env": {"PYTHONPATH": TESTS}}


def spec(tmp_path, name="exact", args=()):
    return {"name": name, "model": "/models/adder", "served_model_name": name, "args": list(args),
            "log_dir": str(tmp_path / "logs"), "host": "127.0.0.1", **STAND_IN}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    return "Z" not in subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout


@pytest.mark.integration
def test_server_starts_answers_and_stops(tmp_path):
    srv = ModelServer(spec(tmp_path, args=["--startup-delay", "1.5"]))
    url = srv.start()
    assert url.startswith("http://127.0.0.1:")
    assert srv.wait_ready(30) == url
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "exact", "messages": [
        {"role": "user", "content": "2+3"}]})
    assert r.json()["choices"][0]["message"]["content"] == "5"
    pid = srv.pid()
    srv.stop(grace=5)
    assert not alive(pid)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
    assert "loading /models/adder as exact" in (tmp_path / "logs" / "exact.log").read_text()


@pytest.mark.integration
def test_server_that_exits_is_a_clear_error(tmp_path):
    srv = ModelServer(spec(tmp_path, args=["--exit-code", "3"]))
    srv.start()
    with pytest.raises(ServeError, match=r"exited with status 3 .*ValueError: cannot load model /models/adder"):
        srv.wait_ready(30)


@pytest.mark.integration
def test_server_that_never_gets_ready_is_stopped(tmp_path):
    srv = ModelServer(spec(tmp_path, args=["--startup-delay", "60"]))
    srv.start()
    with pytest.raises(ServeError, match="not ready after 2 s"):
        srv.wait_ready(2)
    assert not alive(srv.pid())


def test_missing_interpreter_is_a_clear_error(tmp_path):
    srv = ModelServer({**spec(tmp_path), "python": str(tmp_path / "no-venv" / "bin" / "python")})
    with pytest.raises(ServeError, match="cannot run .*no-venv/bin/python"):
        srv.start()


def write_items(tmp_path):
    with open(tmp_path / "additions.jsonl", "w") as f:
        for a in range(1, 41):
            for b in range(10, 20):
                f.write(json.dumps({"id": f"{a}+{b}", "question": f"{a}+{b}", "answers": [str(a + b)]}) + "\n")


def served_job(tmp_path, **update):
    write_items(tmp_path)
    (tmp_path / "adder-weights").mkdir(exist_ok=True)  # the model path: absolute in the server's command line
    serve = [{"name": n, "model": "adder-weights", "args": ["--startup-delay", "1"], **STAND_IN}
             for n in ("exact", "weak")]
    job = {
        "name": "served-additions",
        "live": {
            "items": "additions.jsonl", "loss": "normalized_exact_match", "cache_dir": "cache", "serve": serve,
            "candidates": [
                {"id": "exact", "server": "exact", "template": "{question}=", "objective": 2},
                {"id": "weak", "server": "weak", "template": "{question}=", "objective": 1},
            ],
            "judge": {"server": "exact", "mode": "answer"},
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.5, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "size"}, "budget": {"n": 40, "r": 2, "batch": 10}, "seed": 3,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    job.update(update)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def server_pids(log_dir: pathlib.Path):
    """The stand-in server processes of the job in ``log_dir.parent.parent`` (its models
    live there); pgrep's exit status is checked, so a bad pattern cannot pass as "none"."""
    out = subprocess.run(["pgrep", "-f", "--", f"-m helpers.servers --model {log_dir.parent.parent}/"],
                         capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr  # 1: no process matched
    return [int(p) for p in out.stdout.split()]


@pytest.mark.integration
def test_job_serves_its_own_models_and_stops_them(ray_session, tmp_path):
    cfg = load_config(served_job(tmp_path))
    # a relative model path that exists next to the config is made absolute
    (tmp_path / "adder-weights").mkdir(exist_ok=True)
    cfg = load_config(tmp_path / "job.yaml")
    assert cfg.live.serve[0].model == str(tmp_path / "adder-weights")
    result, run_id = execute(cfg)
    uri = f"sqlite:///{tmp_path}/store.db"
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    cert = load_certificate(run_id, uri)
    assert cert["selected"] == "weak" and set(cert["certified_set"]) == {"exact", "weak"}
    logs = tmp_path / "cache" / "servers"
    assert {p.name for p in logs.iterdir()} == {"exact.log", "weak.log"}
    assert "listening on" in (logs / "weak.log").read_text()
    assert not [p for p in server_pids(logs) if alive(p)]  # both servers are gone

    # a rerun finds every answer in the response cache: no server starts, no request is sent
    before = (logs / "weak.log").read_text().count("listening on")
    result2, run_id2 = execute(cfg)
    cert2 = load_certificate(run_id2, uri)
    assert cert2["labels"]["spent"]["requests"] == 0 < cert["labels"]["spent"]["requests"]
    assert (logs / "weak.log").read_text().count("listening on") == before
    assert result2.gpu.starts == 0 and result.gpu.starts == 2
    assert [c["log_e_value"] for c in cert2["candidates"]] == [c["log_e_value"] for c in cert["candidates"]]


@pytest.mark.integration
def test_job_whose_server_fails_ends_in_one_line(tmp_path):
    """A server starts on its candidate's first request, so one that cannot load its model
    fails the running job: one line naming the server and its log, the MLflow run FAILED
    (no certificate), no server process left."""
    path = served_job(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["live"]["serve"][1]["args"] = ["--exit-code", "1"]
    path.write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-m", "certsel.cli", "run", str(path), "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "job failed: server 'weak' exited with status 1" in err[0], proc.stderr
    assert "weak.log: ValueError: cannot load model" in err[0]
    client = MlflowClient(f"sqlite:///{tmp_path}/store.db")
    runs = client.search_runs([client.get_experiment_by_name("certsel").experiment_id])
    assert runs and {r.info.status for r in runs} == {"FAILED"}
    assert not [p for p in server_pids(tmp_path / "cache" / "servers") if alive(p)]  # the healthy one is stopped too


@pytest.mark.parametrize("bad, message", [
    ({"server": "nope"}, "server 'nope' is not in live.serve"),
    ({"server": "exact", "base_url": "http://x:1"}, "exactly one of base_url"),
    ({"base_url": "http://x:1"}, "model: the served model name is required"),
])
def test_server_references_are_validated(tmp_path, bad, message):
    path = served_job(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["live"]["candidates"][0] = {"id": "exact", "template": "{question}", "objective": 1, **bad}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=message):
        load_config(path)


@pytest.mark.integration
def test_cer_eval_on_live_items_with_served_embeddings(ray_session, tmp_path):
    path = served_job(tmp_path, policy={"kind": "cer-eval"}, procedure="fst", order=["weak", "exact"],
                      objective=None, budget={"n": 200, "batch": 20})
    raw = yaml.safe_load(path.read_text())
    raw["live"]["features"] = {"server": "exact", "template": "embed {question}"}
    del raw["live"]["judge"]
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    result, run_id = execute(cfg, output=tmp_path / "report")
    # the features are the server's embeddings of every item, in item order
    items = [json.loads(line) for line in (tmp_path / "additions.jsonl").read_text().splitlines()]
    expect = np.array([[a, b, a + b, 1.0] for a, b in (map(int, it["id"].split("+")) for it in items)])
    np.testing.assert_array_equal(result.data.features, expect)
    # the job's Cer-Eval equals the policy run directly on the recorded losses
    import pyarrow.parquet as pq

    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    weak = log[log.candidate == "weak"]
    rec = next(r for r in result.records if r.name == "weak")
    wrong = np.array([(a * b) % 7 == 0 for a, b in (map(int, it["id"].split("+")) for it in items)], float)
    ref = cer_eval_direct(len(items), delta=0.1, alpha=0.5, seed=[3, 0], features=expect)
    while not ref.done and ref.n_labeled < 200:
        batch = ref.next_items(20)
        ref.update(batch, wrong[batch])
    np.testing.assert_array_equal(weak.item.to_numpy(), ref.labeled_items)
    assert rec.n_human == ref.n_labeled
    assert rec.ci == pytest.approx(ref.ci, abs=1e-12) and rec.status == "certified"


@pytest.mark.integration
def test_cer_eval_with_judge_strata_on_live_items(ray_session, tmp_path):
    """partition: judge on a live job: the judge scores every item once, before any human
    label, and the job's Cer-Eval equals the policy run directly on those strata."""
    path = served_job(tmp_path, policy={"kind": "cer-eval", "partition": "judge"}, procedure="fst",
                      order=["weak", "exact"], objective=None, budget={"n": 200, "batch": 20})
    cfg = load_config(path)
    result, run_id = execute(cfg, output=tmp_path / "report")
    import pyarrow.parquet as pq

    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    weak = log[log.candidate == "weak"]
    judged = weak[weak.role == "judge"].sort_values("item")
    items = [json.loads(line) for line in (tmp_path / "additions.jsonl").read_text().splitlines()]
    assert judged.item.tolist() == list(range(len(items)))  # every item, once
    rec = next(r for r in result.records if r.name == "weak")
    assert rec.n_judge == len(items)
    wrong = np.array([(a * b) % 7 == 0 for a, b in (map(int, it["id"].split("+")) for it in items)], float)
    ref = cer_eval_direct(len(items), delta=0.1, alpha=0.5, seed=[3, 0], judge_scores=judged.loss.to_numpy())
    while not ref.done and ref.n_labeled < 200:
        batch = ref.next_items(20)
        ref.update(batch, wrong[batch])
    human = weak[weak.role == "human"]
    np.testing.assert_array_equal(human.item.to_numpy(), ref.labeled_items)
    assert rec.n_human == ref.n_labeled and rec.ci == pytest.approx(ref.ci, abs=1e-12)
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    assert cert["policy"]["partition"] == "judge" and "without replacement" in cert["guarantee"]
