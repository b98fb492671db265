"""The pipeline's steps as the tasks call them: each takes plain arguments, has a dry run that
prints what it would do, and reports progress on stderr. tasks.py only wires these to the CLI."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from . import build, engine, grammar, recipes, render, standin, upstream
from .derive import image_tags
from .errors import UsageError
from .paths import ROOT
from .progress import say
from .recipes import LoadedRecipe

DEFAULT_REPO = "gaudi-cookbook"


def revision() -> str | None:
    """The cookbook checkout's commit, for the OCI revision label (None outside git); `-dirty` when
    the checkout has uncommitted changes, so the label never claims a commit the image is not."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def base_for(loaded: LoadedRecipe, use_standin: bool) -> render.Base:
    if use_standin:
        return standin.base(loaded.recipe.base.vllm_gaudi.version)
    return render.vault_base(loaded)


def render_recipe(ref: str, out: str | None = None, use_standin: bool = False, dry_run: bool = False) -> Path:
    loaded = recipes.load(ref)
    return render_loaded(loaded, Path(out) if out else render.default_out(loaded, use_standin), use_standin, dry_run)


def render_loaded(loaded: LoadedRecipe, dest: Path, use_standin: bool, dry_run: bool = False) -> Path:
    render.check_out(dest.absolute())  # refused before any work, in a dry run too
    files = render.context_files(loaded, base_for(loaded, use_standin), revision=revision())
    if dry_run:
        for name, data in files.items():
            print(f"would write {dest / name} ({len(data)} bytes)")
        return dest
    render.write_context(files, dest)
    say(f"rendered {loaded.id} into {dest} ({len(files)} files)")
    return dest


def tags_for(loaded: LoadedRecipe, repo: str, use_standin: bool, extra: list[str] | None = None) -> list[str]:
    """The image's tags, each checked against Docker's grammar before anything is built (a dry run too)."""
    said = grammar.image_ref_problem(repo, name_only=True)
    if said:
        raise UsageError(f"--repo {repo!r} is not a repository name: {said}")
    for tag in extra or []:
        said = grammar.image_ref_problem(tag)
        if said:
            raise UsageError(f"--tag {tag!r} is not an image tag: {said}",
                             hint="e.g. --tag registry.example/org/name:1.0")
    tags = image_tags(repo, loaded.id, loaded.recipe.base.vllm_gaudi.version, loaded.hash, use_standin)
    for tag in extra or []:
        if use_standin and "standin" not in tag:
            tag += "-standin"  # a stand-in image is never mistaken for a Gaudi one
        tags.append(tag)
    for tag in tags:
        said = grammar.image_ref_problem(tag)
        if said:
            raise UsageError(f"the tag {tag!r} would not be a valid image tag: {said}")
    return tags


def ensure_standin(loaded: LoadedRecipe, dry_run: bool = False, rebuild: bool = False) -> render.Base:
    return standin.ensure(upstream.pins_for(loaded.recipe.base), dry_run=dry_run, rebuild=rebuild)


def build_recipe(ref: str, use_standin: bool = False, tag: list[str] | None = None, repo: str = DEFAULT_REPO,
                 dry_run: bool = False) -> build.Built | None:
    loaded = recipes.load(ref)
    base = base_for(loaded, use_standin)
    tags = tags_for(loaded, repo, use_standin, tag)
    context = render.default_out(loaded, use_standin)
    if dry_run:
        c = engine.client()
        if use_standin:
            ensure_standin(loaded, dry_run=True)
        else:
            print(f"docker pull {base.from_ref}   # unless present")
        print(f"invoke render --recipe {loaded.id}{' --standin' if use_standin else ''}  # into {context}")
        print(("DOCKER_BUILDKIT=1 " if c.buildkit else "DOCKER_BUILDKIT=0 ")
              + shlex.join([c.path, *build.build_command(context, buildkit=c.buildkit)]))
        for t in tags:
            print(f"{c.path} tag <image-id> {t}")
        return None
    engine.require_daemon()
    if use_standin:
        ensure_standin(loaded)
    build.ensure_base(base)
    render_loaded(loaded, context, use_standin)  # the recipe as loaded above: its hash is in the tags
    built = build.build(context, tags, base)
    print(f"image    {built.image_id}")
    for t in built.tags:
        print(f"tag      {t}")
    print(f"size     {build.mib(built.size)}  (base {base.from_ref}: {build.mib(built.base_size)})")
    print(f"adds     {build.mib(built.added)} over its base")
    return built


def fetch_upstream(ref: str, source: str | None = None, wheel: str | None = None, dry_run: bool = False) -> None:
    loaded = recipes.load(ref)
    pins = upstream.pins_for(loaded.recipe.base)
    upstream.fetch_vllm_gaudi(pins, source or upstream.GITHUB, dry_run=dry_run)
    upstream.fetch_vllm(pins, Path(wheel) if wheel else None, dry_run=dry_run)
