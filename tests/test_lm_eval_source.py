"""The lm-eval label source (``labels: {kind: lm-eval}``): lm-evaluation-harness tasks run
live through lm-eval's own task definitions, against the stand-in OpenAI-compatible server,
through a real Ray and MLflow: a generate_until task (chat completions) and a multiple-choice
task (log-likelihoods from completions with the server's tokenizer endpoints), labels in the
job's random order, the certificate recomputed from the label log, the response cache, and
the one-line errors that stop a job before it buys anything."""

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.errors import InputError
from certsel.orchestrator.inputs.sources import load_job_data
from helpers.lm_eval_runs import write_additions_task, write_choice_task
from certsel.policies import log_evalue_paths
from helpers.servers import adder_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    write_additions_task(root, n=240)
    write_choice_task(root, n=240)
    return root


def _job(tmp_path, tasks, url, task, **over):
    if task == "additions":  # generate_until through chat completions
        model = "local-chat-completions"
        args = f"base_url={url}/v1/chat/completions,model={{m}},tokenizer_backend=None,num_concurrent=8"
    else:  # multiple choice: log-likelihoods through completions and the server's tokenizer
        model = "local-completions"
        args = f"base_url={url}/v1/completions,model={{m}},tokenizer_backend=remote,num_concurrent=1"
    job = {"name": f"lm-eval-{task}",
           "labels": {"kind": "lm-eval", "task": task, "include_path": str(tasks), "cache_dir": "cache",
                      "apply_chat_template": task == "additions",
                      "candidates": [{"id": m, "model": model, "model_args": args.format(m=m)} for m in ("exact", "weak")]},
           "order": ["exact", "weak"], "policy": {"kind": "r-eval"}, "procedure": "fst", "alpha": 0.1, "delta": 0.1,
           "budget": {"n": 120, "batch": 30}, "seed": 4, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
           "state": {"dir": "jobs"}, **over}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return load_config(tmp_path / "job.yaml")


@pytest.mark.parametrize("task", ["additions", "additions_mc"])
def test_an_lm_eval_task_certifies_live(tmp_path, tasks, ray_session, task):
    from certsel.orchestrator.commands.job import execute

    with adder_server() as (url, server):
        cfg = _job(tmp_path, tasks, url, task)
        result, run_id = execute(cfg, output=tmp_path / "out")
        calls = dict(server.calls)
        cert = json.loads((tmp_path / "out" / "selection.json").read_text())
        assert result.certified == ["exact"] and result.selected == "exact"
        assert cert["data"]["items"] == 240 and "documents of the lm-eval task" in cert["guarantee"]
        log = pq.read_table(tmp_path / "out" / "labels.parquet").to_pandas()
        docs = [json.loads(x) for x in (tasks / f"{task}.jsonl").read_text().splitlines()]
        for row in cert["candidates"]:
            human = log[(log.candidate == row["candidate"]) & (log.role == "human")].sort_values("seq")
            log_e = log_evalue_paths(human.loss.to_numpy(), alpha=0.1, delta=0.1, rhos=[0.0], horizon=120,
                                     observation="split")
            assert row["labels_human"] == len(human) and max(0.0, log_e.max()) == pytest.approx(row["log_e_value"],
                                                                                                abs=1e-6)
            items = human["item"].to_numpy()
            assert not np.array_equal(items, np.arange(items.size))  # the job's random order, not the first n
            # each loss is lm-eval's metric on that document: the stand-in's weak model errs when 7 divides a*b
            for item, loss in zip(items, human.loss, strict=True):
                a, b = (int(x) for x in docs[item]["question"][8:-1].split(" + "))
                wrong = row["candidate"] == "weak" and (a * b) % 7 == 0
                assert loss == (1.0 if wrong else 0.0)
        if task != "additions":
            return
        # every document went to the server once; a fresh job over the same items asks lm-eval's cache instead
        cfg2 = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
        result2, _ = execute(cfg2, output=tmp_path / "out2", track=False)
        assert server.calls == calls
        assert result2.certified == result.certified


def test_mistakes_stop_the_job_before_any_label(tmp_path, tasks):
    url = "http://127.0.0.1:9"  # nothing is asked: every check runs before the first label
    cfg = _job(tmp_path, tasks, url, "additions")
    assert load_job_data(cfg).n_items == 240
    bad = {"task": ("gsm9k", "labels.task: unknown lm-eval task 'gsm9k' (not in lm-eval's registry or under"),
           "metric": ("acc", "labels.metric: task 'additions' does not compute 'acc' (it computes exact_match)")}
    for key, (value, message) in bad.items():
        raw = yaml.safe_load((tmp_path / "job.yaml").read_text())
        raw["labels"][key] = value
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_job_data(load_config(tmp_path / "bad.yaml"))
    # a metric that is not a share per document: a task scored by BLEU
    text = (tasks / "additions.yaml").read_text().replace("task: additions", "task: additions_bleu").replace(
        "metric: exact_match", "metric: bleu")
    (tasks / "additions_bleu.yaml").write_text(text)
    raw = yaml.safe_load((tmp_path / "job.yaml").read_text())
    raw["labels"]["task"] = "additions_bleu"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    out = subprocess.run([sys.executable, "-m", "certsel.cli", "run", str(tmp_path / "bad.yaml")], capture_output=True,
                         text=True, cwd=tmp_path)
    (tasks / "additions_bleu.yaml").unlink()
    assert out.returncode == 2, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "labels.metric: 'bleu' is not known to lie in [0, 1] per document" in lines[0]
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "store.db").exists()


def test_a_regression_gate_on_an_lm_eval_task_evaluates_the_baseline_once(tmp_path, tasks, ray_session):
    """The baseline is one of the task's models: each document a candidate is evaluated on is evaluated for the
    baseline too, kept in the label store under the baseline model's identity, and a later gate of another model
    against it reuses those documents' labels; each paired loss is (l - l_base + 1) / 2 of lm-eval's two metrics."""
    from certsel.gates import gate

    with adder_server() as (url, _):
        cfg = _job(tmp_path, tasks, url, "additions")
        raw = yaml.safe_load((tmp_path / "job.yaml").read_text())
        args = raw["labels"]["candidates"][0]["model_args"]
        raw["labels"]["candidates"].append({"id": "off5", "model": "local-chat-completions",
                                            "model_args": args.replace("model=exact", "model=off5")})
        for key in ("order", "alpha"):
            raw.pop(key)
        raw.update(regression={"baseline": "exact", "margin": 0.05}, state={"dir": "jobs", "store": "labels.db"})
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(raw))
        first = gate(tmp_path / "job.yaml", only=["weak"], track=False, output=tmp_path / "out")
        second = gate(tmp_path / "job.yaml", only=["off5"], track=False)
    assert cfg.labels.kind == "lm-eval"
    (w,), (o,) = first.rows, second.rows
    assert first.outcomes == {"weak": "fail"} and second.outcomes == {"off5": "fail"}  # 27% and 20% below exact
    assert w.baseline == "exact" and w.baseline_bought == w.labels > 0 and w.baseline_reused == 0
    paired = o.labels + o.reused
    assert o.baseline_reused == min(paired, w.labels) and o.baseline_bought == paired - o.baseline_reused
    log = pq.read_table(tmp_path / "out" / "labels.parquet").to_pandas()
    human = log[log.role == "human"]
    docs = [json.loads(x) for x in (tasks / "additions.jsonl").read_text().splitlines()]
    for item, loss in zip(human["item"], human.loss, strict=True):
        a, b = (int(x) for x in docs[item]["question"][8:-1].split(" + "))
        assert loss == (1.0 if (a * b) % 7 == 0 else 0.5)  # weak wrong, exact right: (1 - 0 + 1) / 2
