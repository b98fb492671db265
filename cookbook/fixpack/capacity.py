"""A recipe's capacity figures: the capacity lab (cookbook/fixpack/lab/_capacity.py, vLLM's real scheduler and KV
cache manager at the recipe's own KV cache configuration, no model) run on a release tree with the pack
applied, written beside the recipe as capacity.json, which the recipe page's Capacity table shows.
`invoke fixes.capacity` writes it; `--check` writes nothing and fails when it differs from a fresh run
(cookbook/fixpack/lab/test_pack_capacity.py holds the same figures in the lab)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import yaml

from ..host import signals
from ..host.errors import CookbookError
from ..host.paths import ROOT
from ..host.progress import say
from ..prove.docs import CAPACITY
from ..recipe import recipes
from . import fix_lab

CAPACITY_LAB = fix_lab.LAB_TESTS / "_capacity.py"
FILENAME = CAPACITY  # beside recipe.yaml; the recipe page's Capacity table reads it


class CapacityError(CookbookError):
    """The capacity lab could not run, or capacity.json is not what it computes now (exit 1)."""


def command(recipe_path: Path, out: Path) -> list[str]:
    return [str(fix_lab.environment() / "bin" / "python"), str(CAPACITY_LAB), "--page", "--recipe", str(recipe_path),
            "--out", str(out)]


def compute(loaded: recipes.LoadedRecipe, profile: str, timeout: int = 1800) -> dict:
    """The figures, on a patched tree laid out for this run (the pack as an image build applies it)."""
    with signals.interruptible(), tempfile.TemporaryDirectory(prefix="cookbook-capacity.") as tmp:
        tree = fix_lab.make_tree(Path(tmp) / "patched", profile, patched=True)
        out = Path(tmp) / FILENAME
        merged = Path(tmp) / "recipe.yaml"  # what it extends, merged in: the lab reads one document
        merged.write_text(yaml.safe_dump(loaded.data, sort_keys=False))
        say(f"capacity lab: {loaded.rel_path} at its own geometry, stock and with the pack (about 2 minutes on "
            "2 cores)")
        try:
            proc = signals.run(command(merged, out), cwd=fix_lab.LAB_TESTS, env=fix_lab.lab_env_vars(tree),
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CapacityError(f"the capacity lab did not finish in {timeout} s on {loaded.rel_path}") from None
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise CapacityError(f"the capacity lab failed on {loaded.rel_path}:\n{tail}")
        return json.loads(out.read_text())


def drift(committed: dict | None, fresh: dict) -> list[str]:
    """What differs, by key path (an empty list: no drift)."""
    if committed is None:
        return ["the file is missing"]
    out: list[str] = []

    def walk(a, b, where):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        elif a != b:
            out.append(f"{where}: {a!r} written, {b!r} now")

    walk(committed, fresh, "")
    return out


def write(ref: str, profile: str | None = None, check: bool = False, dry_run: bool = False) -> Path:
    """The recipe's capacity.json, measured on a release tree patched with `profile` (the recipe's by default)."""
    loaded = recipes.load(ref)
    profile = profile or loaded.recipe.fixes.profile
    dest = loaded.path.parent / FILENAME
    if dry_run:
        print("would lay out a patched release tree and run: "
              + " ".join(command(loaded.path, Path("<tmp>") / FILENAME)))
        print(f"would {'compare with' if check else 'write'} {dest.relative_to(ROOT)}")
        return dest
    fresh = compute(loaded, profile)
    committed = json.loads(dest.read_text()) if dest.is_file() else None
    if check:
        if problems := drift(committed, fresh):
            raise CapacityError(f"{dest.relative_to(ROOT)} differs from the capacity lab: " + "; ".join(problems[:5]),
                               hint=f"run: invoke fixes.capacity --recipe {loaded.id}")
        say(f"{dest.relative_to(ROOT)} matches the capacity lab")
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(json.dumps(fresh, indent=1) + "\n")
    tmp.replace(dest)
    say(f"wrote {dest.relative_to(ROOT)}; run invoke docs for the page")
    return dest
