# Sourced by scripts/fix-lab.sh and scripts/vllm-cpu-env.sh: one way to build a virtualenv from a
# pinned requirements file, cached under $COOKBOOK_CACHE/<kind>/<key>, where the key is the sha256 of
# that file and the Python version. A complete environment is reused at once; an interrupted build
# (<env>.partial, no .complete marker) is never taken for a complete one.
#
#   cached_venv LABEL KIND REQUIREMENTS PYTHON WHAT [--print] [POST_INSTALL_FUNCTION]
#
# prints the environment's folder; --print prints it without building. POST_INSTALL_FUNCTION, if
# given, runs with the partial environment's python as its argument before the environment is sealed.
cached_venv() {
  local label=$1 kind=$2 req=$3 py=$4 what=$5 mode=${6:-} post=${7:-}
  local cache=${COOKBOOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-cookbook}
  local key env start
  key=$( { cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
  env="$cache/$kind/$key"
  if [ "$mode" = "--print" ] || [ -f "$env/.complete" ]; then
    echo "$env"
    return 0
  fi
  printf '%s: building %s in %s (a few minutes on a cold cache)\n' "$label" "$what" "$env" >&2
  start=$(date +%s)
  rm -rf "$env.partial"
  mkdir -p "$(dirname "$env")"
  "$py" -m venv "$env.partial"
  "$env.partial/bin/python" -m pip install -q --upgrade pip
  # torch first and alone (the CPU build of 2.13.0 where a local wheel is offered); nothing later
  # replaces it, since every other requirement accepts it.
  "$env.partial/bin/python" -m pip install -q "$(grep '^torch==' "$req")"
  "$env.partial/bin/python" -m pip install -q -r "$req"
  [ -z "$post" ] || "$post" "$env.partial/bin/python"
  "$env.partial/bin/python" -m pip freeze > "$env.partial/requirements.lock"
  # A venv records its own path in scripts; we only ever run `bin/python -m …`, which stays valid.
  rm -rf "$env"
  mv "$env.partial" "$env"
  touch "$env/.complete"
  printf '%s: done in %s s: %s\n' "$label" "$(( $(date +%s) - start ))" "$(du -sh "$env" | cut -f1)" >&2
  echo "$env"
}
