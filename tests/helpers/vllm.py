"""What the real-vLLM tests (marker ``vllm``) share: where the model is, how certsel serves it on CPU, the items.

They run when ``CERTSEL_VLLM_MODEL`` names the model directory made by ``bash deploy/cpu/setup.sh`` (and
``CERTSEL_VLLM_PYTHON`` the interpreter of its virtual environment: certsel starts the server itself, as a Ray actor,
through a job's ``live.serve``), or ``CERTSEL_VLLM_URL`` names a running server (``bash deploy/cpu/serve.sh``)."""

from __future__ import annotations

import json
import os

URL = os.environ.get("CERTSEL_VLLM_URL")
MODEL = os.environ.get("CERTSEL_VLLM_MODEL")
# float32 unless told otherwise: on a CPU without native bfloat16 (AVX2 only, as on the CI
# machines) SmolLM2 generates about 5 times faster in float32 (64 chat requests: 16.4 s
# against 78.8 s at bfloat16, measured on two cores); bfloat16 appears only where the
# precision is what a test is about
DTYPE = os.environ.get("CERTSEL_VLLM_DTYPE", "float32")
MEMORY = os.environ.get("CERTSEL_VLLM_MEMORY_FRACTION", "0.25")
# vLLM's engine in the API server's process instead of two more (an engine core and its worker), as
# deploy/cpu/serve.sh runs it: a start takes 20 s instead of 30 on two idle cores, and 64 chat requests 5.2 s instead
# of 6.9 (no inter-process queue)
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def server_args(dtype: str | None = DTYPE) -> list[str]:
    """The CPU server's arguments (``dtype`` None: the caller names its own)."""
    return [*(["--dtype", dtype] if dtype else []), "--max-model-len", "2048", "--enforce-eager",
            "--gpu-memory-utilization", MEMORY]


def serve_entry(name: str, *, extra=(), dtype: str | None = DTYPE, **more) -> dict:
    """A ``live.serve`` entry for the model under ``name``."""
    return {"name": name, "model": MODEL, "startup_timeout": 1200, "env": ENV,
            "args": [*extra, *server_args(dtype)], **more}


def endpoint():
    """Where the candidates and the judge are served: certsel's own server, or a given URL."""
    if MODEL is not None:
        return {"server": "smollm2"}, [serve_entry("smollm2")]
    return {"base_url": URL, "model": "smollm2"}, []


def write_items(tmp_path) -> None:
    """The 81 single-digit additions as live items (``items.jsonl``)."""
    with open(tmp_path / "items.jsonl", "w") as f:
        for a in range(1, 10):
            for b in range(1, 10):
                f.write(json.dumps({"id": f"{a}+{b}", "question": f"{a}+{b}", "answer": str(a + b)}) + "\n")
