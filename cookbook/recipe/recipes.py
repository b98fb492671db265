"""Load recipes: find by id or path, resolve `extends`, validate the schema and the rules.

Every problem names the file, the key path and the line, and all of a recipe's problems are
reported together.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from inimage import fixplan, rules

from ..host import grammar
from ..host.errors import FixError, RecipeError, UsageError, where
from ..host.paths import RECIPES, ROOT
from . import derive, fixes, hardware, release, yamlsource
from .release import Release
from .schema import Recipe
from .yamlsource import KeyPath, Source, dotted

RECIPE_FILE = "recipe.yaml"


@dataclass(frozen=True)
class LoadedRecipe:
    id: str
    path: Path
    recipe: Recipe
    chain: tuple[Source, ...]  # the file itself first, then what it extends
    data: dict  # the merged document the schema validated (with what its release fills in)
    hash: str  # sha256 of the merged document, its release's data filled in: the recipe's content hash
    profile: rules.Profile
    release: Release

    @property
    def fixes(self) -> list[str]:
        """The fixes this recipe gets, in pack order (some may not be written yet)."""
        return fixplan.select(self.profile.order, self.profile.opt_in, self.recipe.fixes.opt_in)

    def line_of(self, keys: KeyPath) -> str:
        """Where the recipe says a key; for a base or fix-profile value it leaves to its release, where the
        release file says it (the pins are its top-level keys, the image fields are under its `base`)."""
        if not any(keys in s.lines for s in self.chain):
            if keys[:1] == ("base",) and len(keys) > 1:
                return release.locate(self.release.release, keys[1:] if keys[1] in release.PINS else keys)
            if keys == ("fixes", "profile"):
                return release.locate(self.release.release, ("profile",))
        return locate(self.chain, keys)

    @property
    def rel_path(self) -> str:
        """The recipe file, relative to the checkout where it is inside it."""
        return _rel(self.path)


def locate(chain: tuple[Source, ...], keys: KeyPath) -> str:
    """`file:line (key a.b)`: the file of the chain that says that key, else the nearest parent key."""
    for source in chain:
        if keys in source.lines:
            return where(_rel(source.path), source.lines[keys], dotted(keys))
    for source in chain:
        line = source.line_of(keys)
        if line is not None:
            return where(_rel(source.path), line, dotted(keys))
    return where(_rel(chain[0].path), None, dotted(keys))


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def known_ids(root: Path = RECIPES) -> dict[str, Path]:
    return {derive.recipe_id(p.parent.name): p for p in sorted(root.glob(f"*/*/{RECIPE_FILE}"))}


def resolve_ref(ref: str, root: Path = RECIPES, relative_to: Path | None = None) -> Path:
    """A recipe id (`qwen3.5-27b-fp8`) or a path to a recipe.yaml (or its folder)."""
    ids = known_ids(root)
    if ref in ids:
        return ids[ref]
    for base in filter(None, (relative_to, Path.cwd())):
        candidate = (base / ref).resolve()
        if candidate.is_dir():
            candidate = candidate / RECIPE_FILE
        if candidate.is_file():
            return candidate
    raise RecipeError(
        f"unknown recipe {ref!r}",
        hint="use one of the known ids: " + (", ".join(ids) or "(none)") + ", or a path to a recipe.yaml",
    )


def merge(parent: dict, child: dict) -> dict:
    """Child over parent: mappings merge key by key; lists and scalars replace."""
    out = dict(parent)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_chain(path: Path, root: Path) -> tuple[tuple[Source, ...], dict]:
    chain: list[Source] = []
    seen: list[Path] = []
    merged_layers: list[dict] = []
    current = path.resolve()
    while True:
        if current in seen:
            cycle = " -> ".join(_rel(p) for p in seen + [current])
            raise RecipeError(f"`extends` forms a cycle: {cycle}", where=where(_rel(seen[-1])),
                              hint="make one of these recipes stand on its own")
        seen.append(current)
        source = yamlsource.load(current)
        if not isinstance(source.data, dict):
            raise RecipeError("a recipe must be a YAML mapping", where=where(_rel(current), 1))
        chain.append(source)
        merged_layers.append(source.data)
        parent = source.data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise RecipeError("`extends` takes a recipe id or a path",
                              where=locate((source,), ("extends",)))
        try:
            current = resolve_ref(parent, root, relative_to=current.parent)
        except RecipeError as exc:
            raise RecipeError(exc.what, where=locate((source,), ("extends",)), hint=exc.hint) from None
        tree = _tree_of(seen[0], root)
        if current.name != RECIPE_FILE or not current.is_relative_to(tree):
            raise RecipeError(f"`extends: {parent}` leads to {current}, which is not a {RECIPE_FILE} in the "
                              f"recipe tree {tree}", where=locate((source,), ("extends",)),
                              hint="extend a recipe by its id, or by a path inside the tree")
    data: dict = {}
    for layer in reversed(merged_layers):
        data = merge(data, layer)
    data.pop("extends", None)
    if "extends" in chain[0].data:
        data["extends"] = chain[0].data["extends"]
    return tuple(chain), data


def _tree_of(path: Path, root: Path) -> Path:
    """The recipe tree a recipe belongs to (`<tree>/<Org>/<Model>/recipe.yaml`): `extends` stays inside it."""
    root = root.resolve()
    return root if path.is_relative_to(root) else path.parents[2]


def content_hash(rid: str, data: dict) -> str:
    canonical = json.dumps({"id": rid, "recipe": data}, sort_keys=True, separators=(",", ":"))
    return fixplan.sha256_bytes(canonical.encode())


def load(ref: str | Path, root: Path = RECIPES) -> LoadedRecipe:
    path = resolve_ref(str(ref), root)
    rid = derive.recipe_id(path.parent.name)
    said = grammar.problem("slug", rid)
    if said:  # the id names tags, labels and folders
        raise RecipeError(f"recipe id {rid!r} (the lower-cased folder name) is not usable: {said}",
                          where=where(_rel(path)), hint="rename the model folder")
    chain, data = _read_chain(path, root)
    return validate(rid, path, chain, data)


def with_release(chain: tuple[Source, ...], data: dict) -> tuple[Release, dict]:
    """The recipe's release, and the merged document with what the recipe does not say taken from it: the
    base (image, digest, Python, pins) and the fix profile. The pins are the release's alone."""
    name = data.get("release")
    if not isinstance(name, str):
        raise RecipeError("a recipe names its release (a file under releases/)", where=locate(chain, ("release",)),
                          hint=f"add `release: {release.default().release}` (known: {', '.join(release.names())})")
    try:
        rel = release.load(name)
    except RecipeError as exc:
        raise RecipeError(exc.what, where=locate(chain, ("release",)), hint=exc.hint) from None
    base = data.get("base")
    for key in release.PINS if isinstance(base, dict) else ():
        if key in base:
            raise RecipeError(f"base.{key} is release {name}'s to say (releases/{name}.yaml), not the recipe's",
                              where=locate(chain, ("base", key)),
                              hint="remove it; to build on other versions, name another release")
    return rel, merge(rel.recipe_defaults(), data)


def validate(rid: str, path: Path, chain: tuple[Source, ...], data: dict) -> LoadedRecipe:
    """The schema and every rule on a merged recipe document (`load` reads one from its files), once the
    recipe's release has filled in what the recipe leaves to it."""
    rel, data = with_release(chain, data)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_report(path, [_schema_problem(chain, e) for e in exc.errors()])) from None
    try:
        spec = fixes.load_profile(recipe.fixes.profile)
    except FixError as exc:  # name where the recipe asked for it
        raise RecipeError(exc.what, where=locate(chain, ("fixes", "profile")), hint=exc.hint) from None
    if spec.release != rel.release and spec.release in release.names():
        raise RecipeError(f"fix profile {recipe.fixes.profile} is release {spec.release}'s, and the recipe's "
                          f"release is {rel.release}", where=locate(chain, ("fixes", "profile")),
                          hint=f"leave fixes.profile out: release {rel.release}'s is {rel.profile}")
    profile = rules.Profile(name=recipe.fixes.profile, order=spec.order, opt_in=spec.opt_in)
    violations = rules.check(recipe, profile)
    if violations:
        raise RecipeError(_report(path, [f"{locate(chain, v.key)}: [{v.rule}] {v.message}" for v in violations]))
    return LoadedRecipe(rid, path, recipe, chain, data, content_hash(rid, data), profile, rel)


def list_all(root: Path = RECIPES, as_json: bool = False, accelerator: str | None = None) -> None:
    """`invoke recipes`: one line each: id, model, hardware, release, opt-in fixes; `--json`: the ids alone, as
    a JSON list (a CI matrix reads it); `--accelerator`: only the recipes for that card type."""
    if accelerator is not None and accelerator not in hardware.ACCELERATORS:
        raise UsageError(f"--accelerator {accelerator!r} is not a card type recipes know",
                         hint="one of " + ", ".join(hardware.ACCELERATORS))
    chosen = [lo for lo in load_all(root) if accelerator in (None, lo.recipe.hardware.accelerator)]
    if as_json:
        print(json.dumps(sorted(lo.id for lo in chosen)))
        return
    for loaded in chosen:
        rec = loaded.recipe
        print(f"{loaded.id:36} {rec.model.id:42} {rec.hardware.cards}x {rec.hardware.accelerator:7} "
              f"{rec.base.vllm_gaudi.version}  opt-in: {', '.join(rec.fixes.opt_in) or '-'}")


def load_all(root: Path = RECIPES) -> list[LoadedRecipe]:
    return [load(p, root) for p in known_ids(root).values()]


def _report(path: Path, problems: list[str]) -> str:
    noun = "problem" if len(problems) == 1 else "problems"
    return f"recipe {_rel(path)}: {len(problems)} {noun}\n" + "\n".join(f"  {p}" for p in problems)


def _schema_problem(chain: tuple[Source, ...], err: dict) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        valid = _keys_at(Recipe, loc[:-1])
        near = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; valid keys here: {', '.join(valid)}"
        return f"{locate(chain, loc)}: unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return f"{locate(chain, loc)}: missing key {loc[-1]!r}"
    if loc[-1:] == ("[key]",):  # a mapping key with the wrong grammar (an env name, a fix name)
        loc = loc[:-1]
        return f"{locate(chain, loc)}: key {loc[-1]!r}: {err['msg'].removeprefix('Value error, ')}"
    message = err["msg"].removeprefix("Value error, ")
    if loc[:1] == ("env",) and kind == "string_type":
        message += " (quote env values: YAML reads true, 1 and 0.3 as non-strings)"
    return f"{locate(chain, loc)}: {message} (got {err.get('input')!r})"


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The valid keys of the schema at a key path (aliases where the schema uses them)."""
    current: object = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            current = field.annotation
        else:
            args = typing.get_args(current)
            current = args[-1] if args else None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _unwrap(tp: object) -> object:
    """Optional[X] -> X."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp
