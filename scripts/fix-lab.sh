#!/usr/bin/env bash
# Build the fix lab's Python environment: CPU torch 2.13.0 and vLLM 0.26.0's pure-Python requirements
# (tests/lab/requirements.txt), in a virtualenv cached by the sha256 of that file and the Python
# version. vLLM and vllm-gaudi are not installed into it: the lab tests put a pristine or a patched
# copy of the release's files on the path. Prints the environment's folder. Idempotent: a complete
# environment is reused at once; an interrupted build is never taken for a complete one.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'fix-lab: %s\n' "$*" >&2; }

req=tests/lab/requirements.txt
py=${COOKBOOK_LAB_PYTHON:-python3}
cache=${COOKBOOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-cookbook}
key=$( { cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
lab="$cache/lab/$key"

if [ "${1:-}" = "--print" ]; then
  echo "$lab"
  exit 0
fi
if [ -f "$lab/.complete" ]; then
  echo "$lab"
  exit 0
fi

say "building the fix lab environment in $lab (about 2 GB; a few minutes on a cold cache)"
start=$(date +%s)
rm -rf "$lab.partial"
mkdir -p "$(dirname "$lab")"
"$py" -m venv "$lab.partial"
"$lab.partial/bin/python" -m pip install -q --upgrade pip
# torch first and alone (the CPU build of 2.13.0 where a local wheel is offered); nothing later
# replaces it, since every other requirement accepts it.
"$lab.partial/bin/python" -m pip install -q "$(grep '^torch==' "$req")"
"$lab.partial/bin/python" -m pip install -q -r "$req"
"$lab.partial/bin/python" -m pip freeze > "$lab.partial/requirements.lock"
# A venv records its own path in scripts; the lab only ever runs `bin/python -m …`, which stays valid.
rm -rf "$lab"
mv "$lab.partial" "$lab"
touch "$lab/.complete"
say "done in $(( $(date +%s) - start )) s: $(du -sh "$lab" | cut -f1)"
echo "$lab"
