"""The recipe's rules at run time: the image's entrypoint reads its final `vllm serve` command and
environment back into the recipe they came from and runs the very rules `invoke validate` runs.

Arguments after the image name are appended to the recipe's flags and `docker run -e` changes the
environment, so without this an image would serve what the page forbids. Standard library only (a
`--config` file is read with the image's PyYAML, which vLLM needs, or refused where it is absent): the
image carries this package with the recipe, its profile and the serve flags' types and bounds as data
rendered from the schema (render.runtime_data), so nothing here is a second copy of a rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import rules, settings

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


# vLLM 0.26.0's short names for the flags the rules read (engine/arg_utils.py). tests/inimage/test_runtime.py
# checks them against the release's source, and that no other vLLM flag is a prefix of one of ours
# (so an abbreviation that is unique among these flags is the flag vLLM reads, or one vLLM refuses).
ALIASES = {"-tp": "--tensor-parallel-size", "-q": "--quantization"}
# Flags vLLM reads with its human-readable integer type: 2k is 2000, 2K is 2048.
READABLE_INTS = {"--max-num-batched-tokens", "--max-model-len"}
PORT_SPEC = {"field": None, "kind": "port", "min": PORT_MIN, "max": PORT_MAX}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as values, not flags
_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class Unreadable(ValueError):
    """An argument list the guard cannot read as vLLM would: it is refused, never let through."""


def _readable_int(raw: str) -> int:
    text = raw.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if not m:
        return int(text)
    number, suffix = m.groups()
    if suffix.isupper():
        return int(number) * _SUFFIX[suffix]  # vLLM refuses decimals with binary suffixes: so does int()
    return int(float(number) * _SUFFIX[suffix])


def config_words(path: str) -> list[str]:
    """The words vLLM puts in place of `--config FILE` (a YAML mapping): `--key value` for each entry,
    `--key` alone for true, nothing for false, a list's items after its key, a mapping as JSON."""
    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise Unreadable(f"--config {path}: vLLM reads only a .yaml or .yml file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable(f"--config {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        import yaml  # the image's Python has it (vLLM needs it); the guard does not read YAML itself
    except ImportError:
        raise Unreadable(f"--config {path}: this Python has no YAML reader to check the file with") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise Unreadable(f"--config {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise Unreadable(f"--config {path}: must hold a mapping of flag names to values")
    words: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            words += [f"--{key}"] if value else []
        elif isinstance(value, list):
            words += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            words += [f"--{key}", json.dumps(value)]
        else:
            words += [f"--{key}", str(value)]
    return words


def _with_config(words: list[str]) -> list[str]:
    """vLLM reads `--config FILE` (that exact word, once) before anything else and puts the file's flags
    before the command's other flags, so the command's own flags win. Other spellings it does not read:
    refused, since the guard cannot tell what the user meant."""
    for w in words:
        name = w.split("=", 1)[0].replace("_", "-")
        if w != "--config" and len(name) > 2 and "--config".startswith(name) or name == "--config" and "=" in w:
            raise Unreadable(f"{w}: write the config file as --config FILE, the one form vLLM reads")
    if "--config" not in words:
        return words
    if words.count("--config") > 1:
        raise Unreadable("--config is given more than once; vLLM reads one config file")
    i = words.index("--config")
    if i + 1 >= len(words):
        raise Unreadable("--config needs a file")
    return config_words(words[i + 1]) + words[:i] + words[i + 2:]


def _merge(into: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] = into[k] + v
        else:
            into[k] = v


def _normalised(words: list[str]) -> list[str]:
    """Words as vLLM's parser rewrites them before argparse sees them: `_` as `-` in a long flag's name
    (up to its first `.` or `=`), `-O3` as the optimisation level, and every dotted word
    (`--limit-mm-per-prompt.image 4`, `--x.y+ a,b`) merged into one JSON value per flag, put last."""
    out, dotted = [], {}
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.startswith("--"):
            key, eq, value = w.partition("=")
            head, dot, tail = key[2:].partition(".")
            w = "--" + head.replace("_", "-") + dot + tail + eq + value
        elif w.startswith("-O") and w != "-O":
            out += ["--optimization-level", w[3:] if w[2:3] == "=" else w[2:]]
            continue
        key, eq, value = w.partition("=")
        if not (w.startswith("-") and "." in key):  # a dotted word: "-" first and a "." before any "="
            out.append(w)
            continue
        if not eq:
            if i >= len(words):
                raise Unreadable(f"{w} needs a value")
            value, i = words[i], i + 1
        if key.endswith("+"):
            key, item = key[:-1], value.split(",")
        else:
            try:
                item = json.loads(value)
            except ValueError:
                try:
                    item = _readable_int(value)
                except ValueError:
                    item = value
        base, *path = key.split(".")
        for part in reversed(path):
            item = {part: item}
        _merge(dotted.setdefault(base, {}), item)
    for base, value in dotted.items():
        out += [base, json.dumps(value)]
    return out


def _option_table(flags: dict) -> dict[str, tuple[str, bool]]:
    """Every spelling of the flags the rules read: option string -> (flag, negated)."""
    table = {"--port": ("--port", False)}
    for flag, spec in flags.items():
        table[flag] = (flag, False)
        if spec["kind"] == "bool":
            table["--no-" + flag[2:]] = (flag, True)  # a bool field is a BooleanOptionalAction in vLLM
    for alias, flag in ALIASES.items():
        if flag in flags:
            table[alias] = (flag, False)
    return table


def _match(word: str, table: dict) -> tuple[str | None, str | None]:
    """The option string argparse takes `word` for among `table`, and its attached value: exact, with
    `=value`, `-qVALUE` for a one-letter short flag, or a unique prefix (vLLM leaves allow_abbrev on)."""
    if word in table:
        return word, None
    name, eq, value = word.partition("=")
    if eq and name in table:
        return name, value
    if word.startswith("--"):
        found = [(o, value if eq else None) for o in table if o.startswith(name)]
    else:  # Python 3.12+ also reads `-t=2` as an abbreviation with a value: so does the guard, on any Python
        found = [(o, word[2:]) for o in table if o == word[:2]]
        found += [(o, value if eq else None) for o in table if o.startswith(name) and o != word[:2]]
    if len(found) > 1:
        raise Unreadable(f"{word} is ambiguous (it could be {', '.join(sorted(o for o, _ in found))}); "
                         "vLLM refuses it too: write the flag out in full")
    return found[0] if found else (None, None)


def _convert(spec: dict, flag: str, raw: str):
    kind = spec["kind"]
    try:
        if kind in ("int", "port"):
            value = _readable_int(raw) if flag in READABLE_INTS else int(raw)
        elif kind == "float":
            value = float(raw)
        elif kind == "json":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError
        else:
            value = raw
    except ValueError:
        said = {"int": "a whole number", "port": "a whole number", "float": "a number",
                "json": "a JSON object"}.get(kind, "a value")
        raise ValueError(f"{flag} takes {said}, got {raw!r}") from None
    low, high = spec.get("min"), spec.get("max")
    if kind in ("int", "float", "port"):
        if low is not None and (value <= low if spec.get("min_exclusive") else value < low):
            raise ValueError(f"{flag} must be {'above' if spec.get('min_exclusive') else 'at least'} {low}, "
                             f"got {raw}")
        if high is not None and value > high:
            raise ValueError(f"{flag} must be at most {high}, got {raw}")
    return value


def parse_serve(words: list[str], serve: dict, flags: dict) -> tuple[dict, list[Finding], int | None]:
    """Apply `vllm serve` flags in order (the last one wins, as in argparse) to the recipe's serve
    values, read as vLLM 0.26.0's parser reads them (config file, aliases, `=`, `_`, abbreviations,
    dotted JSON keys). Returns the new values, argument errors, and the port (None when not given)."""
    serve = dict(serve)
    port = None
    try:
        words = _normalised(_with_config(list(words)))
    except Unreadable as exc:
        return serve, [Finding("arguments", "arguments", str(exc))], None
    table = _option_table(flags)
    errors: list[Finding] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            break  # the rest are positionals, which `vllm serve` refuses
        if not word.startswith("-") or len(word) < 2 or _NEGATIVE_NUMBER.match(word):
            continue
        try:
            option, inline = _match(word, table)
        except Unreadable as exc:
            errors.append(Finding("arguments", word, str(exc)))
            continue
        if option is None:
            continue  # a flag the rules do not concern: vLLM checks it
        flag, negated = table[option]
        spec = PORT_SPEC if flag == "--port" else flags[flag]
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
            value = _convert(spec, flag, raw)
        except ValueError as exc:
            errors.append(Finding("arguments", flag, str(exc)))
            continue
        if flag == "--port":
            port = value
        else:
            serve[spec["field"]] = value
    return serve, errors, port


def _buckets_from_env(buckets: dict, environ: dict) -> tuple[dict, list[Finding]]:
    """`-e VLLM_DECODE_BS_BUCKET_MAX=16` changes the buckets the variable was derived from."""
    buckets = {k: (dict(v) if isinstance(v, dict) else v) for k, v in buckets.items()}
    errors = []
    for field, prefix in settings.BUCKET_ENV.items():
        for part in ("min", "step", "max"):
            name = f"{prefix}_{part.upper()}"
            if name in environ:
                try:
                    buckets[field][part] = int(environ[name])
                except ValueError:
                    errors.append(Finding("arguments", name, f"{name} takes a whole number, got {environ[name]!r}"))
    if settings.EXPONENTIAL_ENV in environ:
        buckets["exponential"] = environ[settings.EXPONENTIAL_ENV] == "True"
    if settings.BUCKET_FILE_ENV in environ:
        buckets["file"] = environ[settings.BUCKET_FILE_ENV] or None
    return buckets, errors


def _where(key: tuple, flags: dict) -> str:
    """A rule's key path, said as the thing a `docker run` user changes."""
    if key[:1] == ("env",) and len(key) > 1:
        return f"env {key[1]}"
    if key[:1] == ("serve",) and len(key) > 1:
        return next((f for f, s in flags.items() if s["field"] == key[1]), ".".join(map(str, key)))
    if key[:1] == ("buckets",) and len(key) > 1:
        return f"buckets.{key[1]} (env {settings.BUCKET_ENV.get(key[1], '')}_*)"
    return ".".join(map(str, key))


def check(data: dict, command: list[str], environ: dict) -> tuple[list[Finding], list[Finding], int | None]:
    """(argument errors, rule findings, port) for the final command and environment of an image
    whose recipe, profile and flag table are `data` (render.runtime_data)."""
    recipe = json.loads(json.dumps(data["recipe"]))  # a private copy
    flags = data["flags"]
    serve, errors, port = parse_serve(command[3:], recipe["serve"], flags)
    derived = settings.derived_env_names()
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
