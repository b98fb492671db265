"""The recipe's rules at run time: the image's entrypoint reads its final `vllm serve` command and
environment back into the recipe they came from and runs the very rules `invoke validate` runs.

Arguments after the image name are appended to the recipe's flags and `docker run -e` changes the
environment, so without this an image would serve what the page forbids. Standard library only: the
image carries this module with rules.py, derive.py and grammar.py (render.RUNTIME_MODULES), and the
recipe, its profile and the serve flags' types and bounds as data rendered from the schema
(render.runtime_data), so nothing here is a second copy of a rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import derive, rules

# Ports are Docker's and the kernel's bounds; the schema says the same for image.port.
PORT_MIN, PORT_MAX = 1, 65535


class View(dict):
    """A JSON object read like the schema's models: `r.serve.max_num_seqs` and `r.env.get(...)` both
    work, so the rules run unchanged on it."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def view(value):
    if isinstance(value, dict):
        return View({k: view(v) for k, v in value.items()})
    if isinstance(value, list):
        return [view(v) for v in value]
    return value


@dataclass(frozen=True)
class Finding:
    rule: str  # a rule of rules.py, or "arguments" for a value that does not parse
    where: str  # the flag or variable it concerns
    message: str


def _flag_name(word: str) -> tuple[str, str | None]:
    """`--max_num_seqs=8` -> ("--max-num-seqs", "8"): vLLM reads `_` in flag names as `-`."""
    name, eq, value = word.partition("=")
    return "--" + name[2:].replace("_", "-"), (value if eq else None)


def _resolve(name: str, flags: dict) -> str | None:
    """A flag as vLLM's argparse reads it: exact, `--no-x` of a negatable one, or an unambiguous prefix."""
    if name in flags:
        return name
    base = name.split(".", 1)[0]  # --limit-mm-per-prompt.image 4
    if "." in name and flags.get(base, {}).get("kind") == "json":
        return name
    matches = [f for f in flags if f.startswith(name)]
    return matches[0] if len(matches) == 1 and len(name) > 3 else None


def _convert(spec: dict, flag: str, raw: str):
    kind = spec["kind"]
    try:
        if kind == "int":
            value = int(raw)
        elif kind == "float":
            value = float(raw)
        elif kind == "json":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError
        else:
            value = raw
    except ValueError:
        said = {"int": "a whole number", "float": "a number", "json": "a JSON object"}.get(kind, "a value")
        raise ValueError(f"{flag} takes {said}, got {raw!r}") from None
    low, high = spec.get("min"), spec.get("max")
    if kind in ("int", "float"):
        if low is not None and (value <= low if spec.get("min_exclusive") else value < low):
            raise ValueError(f"{flag} must be {'above' if spec.get('min_exclusive') else 'at least'} {low}, "
                             f"got {raw}")
        if high is not None and value > high:
            raise ValueError(f"{flag} must be at most {high}, got {raw}")
    return value


def parse_serve(words: list[str], serve: dict, flags: dict) -> tuple[dict, list[Finding], int | None]:
    """Apply `vllm serve` flags in order (the last one wins, as in argparse) to the recipe's serve
    values. Returns the new values, argument errors, and the port (None when not given)."""
    serve = dict(serve)
    errors: list[Finding] = []
    port = None
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, inline = _flag_name(word)
        if name == "--port":
            raw = inline
            if raw is None and i < len(words):
                raw, i = words[i], i + 1
            try:
                port = _convert({"kind": "int", "min": PORT_MIN, "max": PORT_MAX}, "--port", raw or "")
            except ValueError as exc:
                errors.append(Finding("arguments", "--port", str(exc)))
            continue
        negated = name.startswith("--no-") and flags.get("--" + name[5:], {}).get("negatable")
        flag = "--" + name[5:] if negated else _resolve(name, flags)
        if flag is None:
            continue  # a flag the rules do not concern: vLLM checks it
        base, _, key = flag.partition(".")
        spec = flags[base]
        if spec["kind"] == "bool":
            serve[spec["field"]] = not negated
            continue
        raw = inline
        if raw is None:
            if i >= len(words):
                errors.append(Finding("arguments", flag, f"{flag} needs a value"))
                break
            raw, i = words[i], i + 1
        try:
            if key:  # --limit-mm-per-prompt.image 4
                try:
                    item = json.loads(raw)
                except ValueError:
                    item = raw
                serve[spec["field"]] = {**(serve.get(spec["field"]) or {}), key: item}
            else:
                serve[spec["field"]] = _convert(spec, flag, raw)
        except ValueError as exc:
            errors.append(Finding("arguments", flag, str(exc)))
    return serve, errors, port


def _buckets_from_env(buckets: dict, environ: dict) -> tuple[dict, list[Finding]]:
    """`-e VLLM_DECODE_BS_BUCKET_MAX=16` changes the buckets the variable was derived from."""
    buckets = {k: (dict(v) if isinstance(v, dict) else v) for k, v in buckets.items()}
    errors = []
    for field, prefix in derive.BUCKET_ENV.items():
        for part in ("min", "step", "max"):
            name = f"{prefix}_{part.upper()}"
            if name in environ:
                try:
                    buckets[field][part] = int(environ[name])
                except ValueError:
                    errors.append(Finding("arguments", name, f"{name} takes a whole number, got {environ[name]!r}"))
    if derive.EXPONENTIAL_ENV in environ:
        buckets["exponential"] = environ[derive.EXPONENTIAL_ENV] == "True"
    if derive.BUCKET_FILE_ENV in environ:
        buckets["file"] = environ[derive.BUCKET_FILE_ENV] or None
    return buckets, errors


def _where(key: tuple, flags: dict) -> str:
    """A rule's key path, said as the thing a `docker run` user changes."""
    if key[:1] == ("env",) and len(key) > 1:
        return f"env {key[1]}"
    if key[:1] == ("serve",) and len(key) > 1:
        return next((f for f, s in flags.items() if s["field"] == key[1]), ".".join(map(str, key)))
    if key[:1] == ("buckets",) and len(key) > 1:
        return f"buckets.{key[1]} (env {derive.BUCKET_ENV.get(key[1], '')}_*)"
    return ".".join(map(str, key))


def check(data: dict, command: list[str], environ: dict) -> tuple[list[Finding], list[Finding], int | None]:
    """(argument errors, rule findings, port) for the final command and environment of an image
    whose recipe, profile and flag table are `data` (render.runtime_data)."""
    recipe = json.loads(json.dumps(data["recipe"]))  # a private copy
    flags = data["flags"]
    serve, errors, port = parse_serve(command[3:], recipe["serve"], flags)
    derived = derive.derived_env_names()
    buckets, bucket_errors = _buckets_from_env(recipe["buckets"], environ)
    errors += bucket_errors
    recipe["serve"] = serve
    recipe["buckets"] = buckets
    recipe["env"] = {**recipe["env"], **{k: v for k, v in environ.items() if k not in derived}}
    p = data["profile"]
    profile = rules.Profile(name=p["name"], order=p["order"], opt_in=p["opt_in"])
    if errors:
        return errors, [], port
    found = [Finding(v.rule, _where(v.key, flags), v.message) for v in rules.check(view(recipe), profile)]
    return errors, found, port
