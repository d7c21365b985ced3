"""certsel serving real vLLM servers on CPU (SmolLM2-135M-Instruct, deploy/cpu/) for one job: a generating and an
embedding server (Cer-Eval's partition on live items), and one checkpoint at two precisions (a drop against full
precision). Marked ``vllm``; needs ``CERTSEL_VLLM_MODEL`` (+ ``CERTSEL_VLLM_PYTHON``): certsel serves the model itself
(tests/helpers/vllm.py). A module of its own so that the two test processes start servers side by side: the
shared-server tests (tests/test_vllm_cpu.py) run in one, these and tests/test_vllm_swap.py in the other."""

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from mlflow.tracking import MlflowClient
from helpers.reference import log_evalues_from_label_log
from helpers.vllm import MODEL, serve_entry, write_items

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(
    MODEL is None, reason="set CERTSEL_VLLM_MODEL and CERTSEL_VLLM_PYTHON (see deploy/cpu/): certsel serves the model")]


def test_cer_eval_with_vllm_embeddings(ray_session, tmp_path):
    """Cer-Eval on live items: the partition's features are SmolLM2 embeddings from a
    second vLLM server (``--runner pooling --convert embed``), the labels the answers of
    the generating one; the job equals Cer-Eval run directly on its label log."""
    from helpers.policies import cer_eval_direct

    write_items(tmp_path)
    job = {
        "name": "smollm2-cer-eval",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache",
            "serve": [serve_entry("generate"),
                      serve_entry("embed", extra=["--runner", "pooling", "--convert", "embed"])],
            "candidates": [{"id": "strict", "server": "generate", "objective": 3, "timeout": 300,
                            "sampling": {"temperature": 0, "max_tokens": 12},
                            "template": "Compute {question}. Reply with the number only."}],
            "features": {"server": "embed", "template": "Addition: {question}", "timeout": 300},
        },
        "policy": {"kind": "cer-eval"}, "alpha": 0.5, "delta": 0.1, "procedure": "fst",
        "budget": {"n": 81, "batch": 27}, "seed": 0, "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result, run_id = execute(load_config(tmp_path / "job.yaml"), output=tmp_path / "report")
    feats = result.data.features
    assert feats.shape == (81, 576) and np.isfinite(feats).all()  # SmolLM2-135M's hidden size
    assert np.unique(feats.round(6), axis=0).shape[0] == 81  # 81 different questions, 81 different vectors
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    rec = result.records[0]
    ref = cer_eval_direct(81, delta=0.1, alpha=0.5, seed=[0, 0], features=feats)
    losses = dict(zip(log.item, log.loss, strict=True))
    while not ref.done and ref.n_labeled < 81:
        batch = ref.next_items(27)
        ref.update(batch, np.array([losses[int(i)] for i in batch]))
    np.testing.assert_array_equal(log.item.to_numpy(), ref.labeled_items)
    assert rec.n_human == ref.n_labeled and rec.ci == pytest.approx(ref.ci, abs=1e-12)
    assert MlflowClient(f"sqlite:///{tmp_path}/store.db").get_run(run_id).info.status == "FINISHED"


def test_drop_against_full_precision_on_vllm(ray_session, tmp_path):
    """``live.reference``: one SmolLM2 checkpoint served twice by certsel, at bfloat16 and at
    float32 (two ``live.serve`` entries of one checkpoint under different precision
    settings); both are candidates and float32 is the reference, so each candidate's loss is
    its drop against the float32 answer on the item. The reference's drop against itself is
    0 on every item, and every certificate is recomputed from the label log."""
    write_items(tmp_path)
    sampling = {"temperature": 0, "max_tokens": 12}
    template = "Compute {question}. Reply with the number only."
    job = {
        "name": "smollm2-drop",
        "live": {
            "items": "items.jsonl", "loss": "numeric", "cache_dir": "cache",
            "serve": [serve_entry("bf16", dtype="bfloat16"), serve_entry("fp32", dtype="float32")],
            "candidates": [
                {"id": "bf16", "server": "bf16", "template": template, "objective": 2, "sampling": sampling,
                 "timeout": 300},
                {"id": "fp32", "server": "fp32", "template": template, "objective": 4, "sampling": sampling,
                 "timeout": 300},
            ],
            "reference": "fp32",
            "judge": {"server": "fp32", "mode": "answer", "sampling": sampling, "timeout": 300,
                      "template": "Calculate {question}. Answer with just the result."},
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.3, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "size_gb"}, "budget": {"n": 20, "r": 2, "batch": 10}, "seed": 0,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result, run_id = execute(load_config(tmp_path / "job.yaml"), output=tmp_path / "report")
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    for row in cert["candidates"]:
        log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=0.3, delta=0.1, horizon=20)
        assert row["labels_human"] == len(human) > 0
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
        assert set(human.loss.unique()) <= {0.0, 1.0}
    mine = log[log.candidate == "fp32"]
    assert len(mine) > 0 and (mine.loss == 0.0).all()  # no drop against itself, human or judge
    assert "fp32" in cert["certified_set"]
