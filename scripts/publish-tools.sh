#!/usr/bin/env bash
# Debian's tools for publishing and its tests (called by scripts/setup.sh): skopeo pushes images and
# reads manifests back, docker-registry is the real registry the tests start on 127.0.0.1, and
# apache2-utils gives htpasswd (bcrypt) for the registry with auth. cosign and oras are not in
# Debian 12: oras comes from PyPI (pyproject.toml), cosign is left out (see docs/publishing.md).
set -euo pipefail
PACKAGES=(skopeo docker-registry apache2-utils)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  printf 'setup: installing Debian packages: %s\n' "${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends: docker-registry recommends nothing we need; its service is never started
  # by the cookbook (tests run their own on a free port).
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
