"""Jobs and checks the integration tests share: a live job on the additions server
(tests/helpers/servers.py), reading a running job's label logs, waiting, and comparing two
runs' outcomes."""

import json
import sqlite3
import time

import numpy as np
import pytest
import yaml


def write_job(tmp_path, url):
    items = tmp_path / "additions.jsonl"
    with open(items, "w") as f:
        for a in range(1, 41):
            for b in range(10, 20):
                f.write(json.dumps({"id": f"{a}+{b}", "question": f"{a}+{b}", "answers": [str(a + b)]}) + "\n")
    job = {
        "name": "live-additions",
        "live": {
            "items": "additions.jsonl", "loss": "normalized_exact_match", "cache_dir": "cache",
            "candidates": [
                {"id": "exact-short", "base_url": url, "model": "exact", "template": "{question}=", "objective": 1},
                {"id": "weak-short", "base_url": url, "model": "weak", "template": "{question}?", "objective": 0.5},
                {"id": "weak-long", "base_url": url, "model": "weak", "concurrency": 4,
                 "template": "What is {question}? Answer with a number.", "objective": 2},
            ],
            "judge": {"base_url": url, "model": "exact", "mode": "answer", "template": "Compute {question}."},
        },
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.5, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "prompt_cost"}, "budget": {"n": 60, "r": 3, "batch": 10}, "seed": 1,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db", "intervals": "final"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def count_rows(job_dir, table: str) -> int:
    """Rows of ``table`` over the job's label logs (read-only, while the job writes them)."""
    n = 0
    for db in (job_dir / "labels").glob("*.db") if (job_dir / "labels").is_dir() else ():
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
                n += con.execute(f"select count(*) from {table}").fetchone()[0]
        except sqlite3.Error:
            pass
    return n


def logged_labels(job_dir) -> int:
    return count_rows(job_dir, "labels")


def wait_for(cond, timeout=120.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)


def assert_same_outcome(a_records, b_records):
    for a, b in zip(a_records, b_records, strict=True):
        assert (a.name, a.status, a.n_human, a.n_judge, a.t) == (b.name, b.status, b.n_human, b.n_judge, b.t)
        assert a.max_log_e == pytest.approx(b.max_log_e, abs=1e-9)
        np.testing.assert_allclose(a.path, b.path, atol=1e-9)


def no_duplicates(labels: dict):
    for name, log in labels.items():
        pairs = list(zip(log.item.tolist(), log.role.tolist(), strict=True))
        assert len(pairs) == len(set(pairs)), f"{name}: a label appears twice in the log"


def table_certificate(data=None, *, judge="loss_judge_best", objective="avg_bitwidth", order="rank",
                      scheme="r-autoeval+", betting="up", observation="split", procedure="fst", alpha=0.1,
                      delta=0.1, n=300, r=3, seed=0):
    """The certificate of a job on a recorded table, run in this process (every candidate's
    whole budget in one batch: its full e-value path). ``order`` None: fst tests the candidates
    in their names' order."""
    from certsel.config import parse_config
    from certsel.orchestrator.engine.driver import LocalRuntime, run_job
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.certificate import certificate_of
    from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

    data = DEFAULT_TABLE if data is None else data
    names = load_loss_table(data, judge=judge, order=order, objective=objective).candidates.tolist()
    cfg = parse_config({
        "order": names if order is None and procedure == "fst" else None,
        "data": {"path": str(data), "judge": judge, "order": order}, "objective": {"column": objective},
        "policy": {"kind": scheme, "betting": betting, "observation": observation},
        "procedure": procedure, "alpha": alpha, "delta": delta, "seed": seed,
        "budget": {"n": n, "r": r, "batch": n}, "scheduling": {"mode": "full"},
    }, source="table_certificate")
    return certificate_of(run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False))
