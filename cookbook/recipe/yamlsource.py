"""YAML that remembers where each key stands, so errors can name the file, key path and line."""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from ..host.errors import RecipeError, where

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Source:
    """A loaded YAML document and the line (1-based) of every key path in it."""

    path: Path
    data: object
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, keys: KeyPath) -> int | None:
        """The line of the deepest key of `keys` that exists in the file."""
        for n in range(len(keys), 0, -1):
            if keys[:n] in self.lines:
                return self.lines[keys[:n]]
        return None


def dotted(keys: KeyPath) -> str:
    return ".".join(str(k) for k in keys)


def read_text(path: Path, error=RecipeError) -> str:
    """A YAML file's text, or one message naming the line where it stops being UTF-8 (or unreadable)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}", where=where(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(f"{path.name} is not UTF-8 text (byte 0x{data[exc.start]:02x})", where=where(path, line),
                    hint="save the file as UTF-8") from None


def load(path: Path, error=RecipeError) -> Source:
    """A YAML file with the line of each key. The same text is parsed once (a render of every recipe reads
    the whole fix pack for each); the caller gets its own copy of the data."""
    source = _parse(path, read_text(path, error), error)
    return dataclasses.replace(source, data=copy.deepcopy(source.data))


@functools.lru_cache(maxsize=512)
def _parse(path: Path, text: str, error) -> Source:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise error(
            f"{path.name} is not valid YAML: {exc.problem or exc}",
            where=where(path, line),
            hint="correct the YAML syntax at that line",
        ) from None
    except ValueError as exc:  # a scalar YAML types but cannot build, such as the date 2026-13-45
        raise error(f"{path.name}: a value YAML reads as a date or number is not one: {exc}",
                    where=where(path, _unbuildable_line(node)), hint="correct it, or quote it if it is text") from None
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _walk(node, (), lines, path, error)
    return Source(path=path, data=data, lines=lines)


def validated(model: type[BaseModel], source: Source, error=RecipeError) -> BaseModel:
    """`source` as `model`, or one error naming the file, key path and line of each problem."""
    try:
        return model.model_validate(source.data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            label = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"  {where(source.path, source.line_of(loc), dotted(loc))}: {label}")
        raise error(f"{source.path} is not valid:\n" + "\n".join(problems)) from None


def _walk(node, prefix: KeyPath, lines: dict[KeyPath, int], path: Path, error) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key_node.tag != "tag:yaml.org,2002:str":
                # YAML 1.1 reads on/off/yes/no as booleans, even as keys.
                raise error(
                    f"key {key!r} does not read as a string in YAML",
                    where=where(path, key_node.start_mark.line + 1, dotted(prefix + (key,))),
                    hint=f"quote it ('{key}') or choose another name",
                )
            if key in seen:
                # PyYAML silently keeps the last one; a recipe must say each thing once.
                raise error(
                    f"duplicate key {key!r}",
                    where=where(path, key_node.start_mark.line + 1, dotted(prefix + (key,))),
                    hint="keep one of the two",
                )
            seen.add(key)
            lines[prefix + (key,)] = key_node.start_mark.line + 1
            _walk(value_node, prefix + (key,), lines, path, error)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[prefix + (i,)] = item.start_mark.line + 1
            _walk(item, prefix + (i,), lines, path, error)


def _unbuildable_line(node) -> int | None:
    """The line of the first scalar that YAML tags (a date, a number) but cannot build."""
    constructor = yaml.SafeLoader("")
    stack = [node]
    while stack:
        current = stack.pop(0)
        if isinstance(current, yaml.ScalarNode):
            try:
                constructor.construct_object(current, deep=True)
            except ValueError:
                return current.start_mark.line + 1
        elif isinstance(current, yaml.MappingNode):
            stack.extend(v for pair in current.value for v in pair)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return None
