"""End to end against a real vLLM server on CPU (SmolLM2-135M-Instruct, deploy/cpu/).

Marked ``vllm`` and run when ``CERTSEL_VLLM_URL`` names a running server (``bash
deploy/cpu/setup.sh && bash deploy/cpu/serve.sh`` gives http://127.0.0.1:8000); the rest
of the suite does not need it. The task is generated here: single-digit additions with
exact answers. Three prompt templates are the candidates, the same model is the judge
(answering the question itself), R-AutoEval+ with Bonferroni.
"""

import json
import os

import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.job import execute
from certsel.orchestrator.tracking import load_certificate
from mlflow.tracking import MlflowClient
from reference import log_evalues_from_label_log

URL = os.environ.get("CERTSEL_VLLM_URL")
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(URL is None, reason="set CERTSEL_VLLM_URL to a running SmolLM2 vLLM server")]


def test_three_templates_on_smollm2(ray_session, tmp_path):
    with open(tmp_path / "items.jsonl", "w") as f:
        for a in range(1, 10):
            for b in range(1, 10):
                f.write(json.dumps({"id": f"{a}+{b}", "question": f"{a}+{b}", "answer": str(a + b)}) + "\n")
    sampling = {"temperature": 0, "max_tokens": 12}
    job = {
        "name": "smollm2-additions",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache",
            "candidates": [
                {"id": "bare", "base_url": URL, "model": "smollm2", "template": "{question} =", "objective": 1,
                 "sampling": sampling, "timeout": 300},
                {"id": "ask", "base_url": URL, "model": "smollm2", "template": "What is {question}?", "objective": 2,
                 "sampling": sampling, "timeout": 300},
                {"id": "strict", "base_url": URL, "model": "smollm2", "objective": 3, "sampling": sampling,
                 "template": "Compute {question}. Reply with the number only.", "timeout": 300},
            ],
            "judge": {"base_url": URL, "model": "smollm2", "mode": "answer", "sampling": sampling, "timeout": 300,
                      "template": "Calculate {question}. Answer with just the result."},
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.5, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "template_rank"}, "budget": {"n": 20, "r": 2, "batch": 10}, "seed": 0,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    cfg = load_config(tmp_path / "job.yaml")
    result, run_id = execute(cfg, report_dir=tmp_path / "report")
    uri = f"sqlite:///{tmp_path}/store.db"
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    cert = load_certificate(run_id, uri)
    assert cert["labels"]["spent"]["requests"] > 0

    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    for row in cert["candidates"]:
        log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=0.5, delta=0.1, horizon=20)
        assert row["labels_human"] == len(human) == 20
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
        assert set(human.loss.unique()) <= {0.0, 1.0}

    # the second run is served from the cache: no new generation, the same certificate
    result2, run_id2 = execute(cfg)
    cert2 = load_certificate(run_id2, uri)
    assert cert2["labels"]["spent"]["requests"] == 0
    assert [c["log_e_value"] for c in cert2["candidates"]] == [c["log_e_value"] for c in cert["candidates"]]
    assert cert2["certified_set"] == cert["certified_set"]
