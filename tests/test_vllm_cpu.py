"""End to end against a real vLLM server on CPU (SmolLM2-135M-Instruct, deploy/cpu/).

Marked ``vllm``; the rest of the suite does not need it. How it runs (certsel serving the model, or a running server
named by ``CERTSEL_VLLM_URL``): tests/helpers/vllm.py. certsel serving two models for one job, and three swapped
through one slot: tests/test_vllm_serving.py and tests/test_vllm_swap.py.

The task is generated here: single-digit additions with exact answers. Three prompt
templates are the candidates, the same model is the judge (answering the question itself),
R-AutoEval+ with Bonferroni.
"""

import json
import os
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from mlflow.tracking import MlflowClient
from helpers.reference import log_evalues_from_label_log
from helpers.vllm import ENV, MODEL, URL, endpoint, server_args, write_items

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(
    URL is None and MODEL is None,
    reason="set CERTSEL_VLLM_MODEL (+ CERTSEL_VLLM_PYTHON) or CERTSEL_VLLM_URL (see deploy/cpu/)")]


SHARED = "smollm2-shared"  # the served name of the module's shared server


@pytest.fixture(scope="module")
def shared_url(ray_session, tmp_path_factory):
    """One server for the tests that need an endpoint, not certsel's own serving (which the
    first test and tests/test_vllm_serving.py check): started once for the module instead of once per test (about
    20-45 s each on two cores), with the tokenizer endpoints lm-eval's log-likelihoods need. Its
    served name keeps it apart from the servers the jobs start and must stop. With only
    ``CERTSEL_VLLM_URL``, that server (``deploy/cpu/serve.sh``: served as smollm2, tokenizer
    endpoints on) stands in for it; with both, certsel serves, as in :func:`endpoint`."""
    if MODEL is None:
        yield URL.rstrip("/"), "smollm2"
        return
    import ray
    from certsel.config import ServeConfig
    from certsel.workers.serving import server_class

    serve = ServeConfig(name=SHARED, model=MODEL, startup_timeout=1200, env=ENV,
                        args=[*server_args(), "--enable-tokenizer-info-endpoint"])
    spec = {**serve.model_dump(), "python": os.environ.get("CERTSEL_VLLM_PYTHON"), "served_model_name": SHARED,
            "log_dir": str(tmp_path_factory.mktemp("servers"))}
    server = server_class(ray, spec).remote(spec)  # one ModelServer actor, as a job's fleet starts them
    try:
        ray.get(server.start.remote())
        yield ray.get(server.wait_ready.remote(1200)), SHARED
    finally:
        ray.get(server.stop.remote())
        ray.kill(server)


def test_three_templates_on_smollm2(ray_session, tmp_path):
    write_items(tmp_path)
    sampling = {"temperature": 0, "max_tokens": 12}
    where, serve = endpoint()
    job = {
        "name": "smollm2-additions",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache", "serve": serve,
            "candidates": [
                {"id": "bare", **where, "template": "{question} =", "objective": 1,
                 "sampling": sampling, "timeout": 300},
                {"id": "ask", **where, "template": "What is {question}?", "objective": 2,
                 "sampling": sampling, "timeout": 300},
                {"id": "strict", **where, "objective": 3, "sampling": sampling,
                 "template": "Compute {question}. Reply with the number only.", "timeout": 300},
            ],
            "judge": {**where, "mode": "answer", "sampling": sampling, "timeout": 300,
                      "template": "Calculate {question}. Answer with just the result."},
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.5, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "template_rank"}, "budget": {"n": 20, "r": 2, "batch": 10}, "seed": 0,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    cfg = load_config(tmp_path / "job.yaml")
    result, run_id = execute(cfg, output=tmp_path / "report")
    uri = f"sqlite:///{tmp_path}/store.db"
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    cert = load_certificate(run_id, uri)
    assert cert["labels"]["spent"]["requests"] > 0

    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    for row in cert["candidates"]:
        log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=0.5, delta=0.1, horizon=20)
        assert row["labels_human"] == len(human) <= 20  # certified candidates stop early
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
        assert set(human.loss.unique()) <= {0.0, 1.0}

    # the second run is served from the cache: no new generation, the same certificate
    result2, run_id2 = execute(cfg)
    cert2 = load_certificate(run_id2, uri)
    assert cert2["labels"]["spent"]["requests"] == 0
    assert [c["log_e_value"] for c in cert2["candidates"]] == [c["log_e_value"] for c in cert["candidates"]]
    assert cert2["certified_set"] == cert["certified_set"]
    if serve:  # certsel's own server is gone after each job
        import subprocess

        # this job's server only (served as "smollm2", a name no other vllm test's server has): the shared one, and
        # the servers of tests/test_vllm_serving.py and test_vllm_swap.py in the other test process, are not this job's
        left = [line.split()[0] for line in subprocess.run(
            ["pgrep", "-af", f"vllm.entrypoints.openai.api_server --model {MODEL}"],
            capture_output=True, text=True).stdout.splitlines() if "--served-model-name smollm2 " in line]
        assert not left, f"vLLM server processes left running: {left}"
        assert "Application startup complete" in (tmp_path / "cache" / "servers" / "smollm2.log").read_text()


@pytest.mark.parametrize("soft", [False, True])
def test_constrained_and_soft_judge_on_vllm(ray_session, shared_url, tmp_path, soft):
    """A grading judge on the real server. Constrained (the default): vLLM's structured
    outputs hold every verdict to "Score: 0".."Score: 10", so each is parsed at the first
    request (requests = answers + verdicts, no second seeded request) and the judge losses
    lie on the scale's grid. Soft: a yes/no verdict whose loss is P(no) from the token
    probabilities, strictly between 0 and 1 on some items. Certificates recomputed from the
    label log."""
    write_items(tmp_path)
    sampling = {"temperature": 0, "max_tokens": 12}
    url, served = shared_url
    where = {"base_url": url, "model": served}
    judge = {**where, "mode": "grade", "timeout": 300, "sampling": {"temperature": 0, "max_tokens": 8}}
    if soft:
        judge["soft"] = True
    job = {
        "name": "smollm2-judge",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache",
            "candidates": [{"id": "strict", **where, "objective": 3, "sampling": sampling, "timeout": 300,
                            "template": "Compute {question}. Reply with the number only."}],
            "judge": judge,
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.5, "delta": 0.1, "procedure": "fst",
        "budget": {"n": 20, "r": 2, "batch": 10}, "seed": 0, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result, run_id = execute(load_config(tmp_path / "job.yaml"), output=tmp_path / "report")
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    row = cert["candidates"][0]
    log_e, human = log_evalues_from_label_log(log, "strict", alpha=0.5, delta=0.1, horizon=20)
    assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
    judged = log[log.role == "judge"].loss.to_numpy()
    assert len(judged) == row["labels_judge"] > 0 and ((judged >= 0) & (judged <= 1)).all()
    if soft:
        assert ((judged > 0) & (judged < 1)).any()  # probabilities, not hard verdicts
    else:
        assert set((judged * 10).round(9)) <= set(range(11))  # on the 0..10 grid
        # one request per answer and one per verdict: no unparsable verdict needed a second one
        assert row["requests"] == len(set(log[log.candidate == "strict"].item)) + row["labels_judge"]


def test_lm_eval_tasks_on_vllm(ray_session, shared_url, tmp_path):
    """The lm-eval label source on the real server: a generate_until task through chat
    completions and a multiple-choice task scored by log-likelihoods through completions and
    vLLM's tokenizer endpoints (``--enable-tokenizer-info-endpoint``); labels logged and the
    e-values recomputed from the log."""
    from certsel.policies import log_evalue_paths
    from helpers.lm_eval_runs import write_additions_task, write_choice_task

    url, served = shared_url
    write_additions_task(tmp_path / "tasks", n=80)
    write_choice_task(tmp_path / "tasks", n=80)
    for task, model, args in (
        ("additions", "local-chat-completions",
         f"base_url={url}/v1/chat/completions,model={served},tokenizer_backend=None,num_concurrent=4"),
        ("additions_mc", "local-completions",
         f"base_url={url}/v1/completions,model={served},tokenizer_backend=remote,num_concurrent=4"),
    ):
        job = {"name": f"vllm-{task}", "labels": {
            "kind": "lm-eval", "task": task, "include_path": str(tmp_path / "tasks"), "cache_dir": "cache",
            "apply_chat_template": task == "additions",
            "candidates": [{"id": "smollm2", "model": model, "model_args": args}]},
            "policy": {"kind": "r-eval"}, "procedure": "fst", "order": ["smollm2"], "alpha": 0.95, "delta": 0.1,
            "budget": {"n": 40, "batch": 20}, "seed": 0, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
            "state": {"dir": "jobs"}}
        (tmp_path / f"{task}.yaml").write_text(yaml.safe_dump(job))
        result, run_id = execute(load_config(tmp_path / f"{task}.yaml"), output=tmp_path / task)
        cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
        row = cert["candidates"][0]
        log = pq.read_table(tmp_path / task / "labels.parquet").to_pandas().sort_values("seq")
        human = log[log.role == "human"]
        assert row["labels_human"] == len(human) > 0 and set(human.loss.unique()) <= {0.0, 1.0}
        log_e = log_evalue_paths(human.loss.to_numpy(), alpha=0.95, delta=0.1, rhos=[0.0], horizon=40,
                                 observation="split")
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-6)
        assert row["status"] in ("certified", "not certified")


@pytest.mark.parametrize("soft", [False, True])
def test_pairwise_judge_on_vllm(shared_url, tmp_path, soft):
    """SmolLM2 as a pairwise judge between two templates' answers (the candidate's and a
    reference template's), in both orders: every item is asked twice unless its two answers
    are the same text, the verdicts are held to "A"/"B" by structured outputs (hard: each
    order's verdict is 0 or 1, so an item's loss is 0, 1/2 or 1) or read from the letters'
    log-probabilities (soft), and the human labels are the preferences computed from the
    two answers' own losses."""
    import numpy as np
    from certsel.workers.live import Item, LiveSource
    from certsel.workers.losses import answer_loss, preference_loss
    from certsel.workers.openai_source import Endpoint, OpenAIClient, ResponseCache

    url, served = shared_url
    items = [Item(f"{a}+{b}", f"{a}+{b}", (str(a + b),)) for a in range(1, 7) for b in range(3, 8)]

    def client():
        return OpenAIClient(Endpoint(url, served, timeout=300), ResponseCache(tmp_path / "cache.db"))

    sampling = {"temperature": 0, "max_tokens": 12}
    src = LiveSource(items, client(), "{question} =", loss="numeric", sampling=sampling, judge=client(),
                     judge_mode="pairwise", judge_soft=soft, judge_sampling={"temperature": 0, "max_tokens": 4},
                     reference=client(), reference_template="Compute {question}. Reply with the number only.",
                     reference_sampling=sampling)
    idx = np.arange(len(items))
    human, judged = src.human(idx), src.judge(idx)
    cand, ref = src.answers(idx), src.reference_answers(idx)
    want = preference_loss([answer_loss("numeric", a, list(it.references)) for a, it in zip(cand, items, strict=True)],
                           [answer_loss("numeric", a, list(it.references)) for a, it in zip(ref, items, strict=True)])
    np.testing.assert_array_equal(human, want)
    assert ((judged >= 0) & (judged <= 1)).all()
    if not soft:
        assert set(judged.tolist()) <= {0.0, 0.5, 1.0}
    distinct = sum(1 if a == b else 2 for a, b in zip(cand, ref, strict=True))
    assert src.judge_client.stats.sent == distinct  # both orders, each request once, none asked again


def test_inspect_task_on_vllm_stops_early_with_a_certificate(shared_url, tmp_path):
    """An inspect-ai task (single-digit additions, inspect's own ``generate`` and ``match``) on
    SmolLM2 served by the CPU vLLM, through inspect's vllm provider: certsel's manager stops
    it early, and the certificate in the log is certsel's test on the log's scores."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import GenerateConfig, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    from certsel.inspect import CertifiedStopping
    from certsel.policies import log_evalue_paths
    from certsel.policies.sampling import WithoutReplacement

    url, served = shared_url
    data = MemoryDataset([Sample(id=f"{a}+{b}", input=f"What is {a}+{b}? Reply with the number only.",
                                 target=str(a + b)) for a in range(1, 10) for b in range(1, 10)])
    data.shuffle(seed=0)
    manager = CertifiedStopping(at_least=0.2, delta=0.1, futility=0.1)
    model = get_model(f"vllm/{served}", base_url=f"{url}/v1", api_key="none",
                      config=GenerateConfig(temperature=0.0, max_tokens=8))
    [log] = eval(Task(dataset=data, solver=generate(), scorer=match(numeric=True), early_stopping=manager),
                 model=model, max_samples=4, display="none", log_dir=str(tmp_path))
    assert log.status == "success", log.error
    log = read_eval_log(log.location)
    cert = log.results.early_stopping.metadata
    assert cert["status"] in ("certified", "futile") and cert["samples"]["skipped"] > 0
    assert len(log.results.early_stopping.early_stops) == cert["samples"]["skipped_runs"]
    by_id = {s.id: 1.0 if s.scores["match"].value == "C" else 0.0 for s in log.samples}
    n = cert["samples"]["scored"]
    losses = 1.0 - np.array([by_id[i] for i in log.eval.dataset.sample_ids[:n]])
    log_e = log_evalue_paths(losses, alpha=0.8, delta=0.1, rhos=[0.0], horizon=81, sampling=WithoutReplacement(81),
                             observation="split")  # as a certsel job tests
    assert cert["log_e_value"] == pytest.approx(float(log_e.max()), abs=1e-9)
    print(cert["words"])  # for docs/inspect.md (pytest -s)


def test_gate_through_lm_eval_on_vllm(ray_session, shared_url, tmp_path, monkeypatch):
    """``certsel gate`` on an lm-eval task through the real server: SmolLM2 with 3 in-context
    examples and SmolLM2 asked exactly as the reference (0 shots), each gated on recovery >=
    0.5 against the 0-shot model. The same-settings candidate's recovery is exactly 1, so it
    passes; every outcome is one of three and the exit status agrees with them. Run again as a
    new job, every label comes from the label store: none bought, no request to the server."""
    from junitparser import JUnitXml

    from certsel import cli
    from helpers.lm_eval_runs import write_choice_task

    url, served = shared_url
    write_choice_task(tmp_path / "tasks", n=120)
    args = f"base_url={url}/v1/completions,model={served},tokenizer_backend=remote,num_concurrent=4"
    job = {"name": "vllm-gate", "labels": {
        "kind": "lm-eval", "task": "additions_mc", "include_path": str(tmp_path / "tasks"), "cache_dir": "cache",
        "candidates": [{"id": "same", "model": "local-completions", "model_args": args},
                       {"id": "3-shot", "model": "local-completions", "model_args": args, "num_fewshot": 3}],
        "reference": {"id": "0-shot", "model": "local-completions", "model_args": args}},
        "recovery": {"at_least": 0.5}, "policy": {"kind": "r-eval"}, "delta": 0.1,
        "budget": {"n": 60, "batch": 20}, "seed": 0, "state": {"dir": "jobs"}}
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump(job))
    monkeypatch.chdir(tmp_path)
    base = ["gate", "gate.yaml", "--no-tracking", "--labels", "labels.db"]
    code = cli.main([*base, "--json", "first.json", "--junit", "first.xml"])
    first = json.loads((tmp_path / "first.json").read_text())
    outcomes = {c["candidate"]: c["outcome"] for c in first["candidates"]}
    assert outcomes["same"] == "pass" and set(outcomes.values()) <= {"pass", "fail", "undecided"}
    assert code == first["exit_code"] == (1 if "fail" in outcomes.values() else 3 if "undecided" in
                                          outcomes.values() else 0)
    assert all(c["labels"] > 0 and c["reused"] == 0 for c in first["candidates"])
    cases = {case.name for case in next(iter(JUnitXml.fromfile(str(tmp_path / "first.xml"))))}
    assert cases == {"same", "3-shot"}
    assert cli.main([*base, "--fresh", "--json", "again.json"]) == code
    again = json.loads((tmp_path / "again.json").read_text())
    for a, b in zip(first["candidates"], again["candidates"], strict=True):
        assert (b["labels"], b["reused"], b["outcome"]) == (0, a["labels"], a["outcome"])
    cert = json.loads(pathlib.Path(again["files"]["selection"]).read_text())
    assert all(c["requests"] == 0 for c in cert["candidates"])


def test_regression_gate_against_a_served_baseline_on_vllm(ray_session, shared_url, tmp_path):
    """A regression gate of live models on the real server: two prompt templates of SmolLM2 against the baseline
    template 'strict', paired on the same items; the baseline is asked each item a candidate is, each paired loss is
    (l - l_base + 1) / 2 of two exact-match losses, and every e-value is recomputed from the label log at the claim's
    alpha = (1 + margin) / 2."""
    from certsel.gates import gate

    write_items(tmp_path)
    sampling = {"temperature": 0, "max_tokens": 12}
    url, served = shared_url
    where = {"base_url": url, "model": served, "sampling": sampling, "timeout": 300}
    job = {
        "name": "smollm2-regression",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache",
            "candidates": [{"id": "strict", **where, "template": "Compute {question}. Reply with the number only."},
                           {"id": "bare", **where, "template": "{question} ="},
                           {"id": "ask", **where, "template": "What is {question}?"}],
            "judge": {**where, "mode": "answer", "template": "Calculate {question}. Answer with just the result."},
        },
        "regression": {"baseline": "strict", "margin": 0.1},
        "policy": {"kind": "r-autoeval+"}, "delta": 0.1, "budget": {"n": 20, "r": 2, "batch": 10}, "seed": 0,
        "state": {"dir": str(tmp_path / "jobs")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    res = gate(tmp_path / "job.yaml", track=False, output=tmp_path / "report")
    assert set(res.outcomes) == {"bare", "ask"} and set(res.outcomes.values()) <= {"pass", "fail", "undecided"}
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    for c in res.selection.candidates:
        assert c.regression.baseline == "strict" and c.regression.baseline_bought == c.labels_human > 0
        log_e, human = log_evalues_from_label_log(log, c.candidate, alpha=0.55, delta=0.1, horizon=20)
        assert set(human.loss.unique()) <= {0.0, 0.5, 1.0}
        assert max(0.0, log_e.max()) == pytest.approx(c.log_e_value, abs=1e-5)
