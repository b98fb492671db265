#!/usr/bin/env bash
# Build the fix lab's Python environment: CPU torch 2.13.0 and vLLM 0.26.0's pure-Python requirements
# (cookbook/fixpack/lab/requirements.txt), in a virtualenv cached by the sha256 of that file and the Python
# version. vLLM and vllm-gaudi are not installed into it: the lab tests put a pristine or a patched
# copy of the release's files on the path. Prints the environment's folder. Idempotent: a complete
# environment is reused at once; an interrupted build is never taken for a complete one.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/cached-venv.sh
cached_venv fix-lab lab cookbook/fixpack/lab/requirements.txt "${COOKBOOK_LAB_PYTHON:-python3}" \
  "the fix lab environment (about 2 GB)" "${1:-}"
