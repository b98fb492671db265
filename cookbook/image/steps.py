"""The pipeline's steps as the tasks call them: each takes plain arguments, has a dry run that
prints what it would do, and reports progress on stderr. tasks.py only wires these to the CLI."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from ..host import engine, grammar, upstream
from ..host.errors import BuildError, UsageError
from ..host.names import IMAGE_REPO
from ..host.paths import ROOT
from ..host.progress import say
from ..recipe import fixes, recipes
from ..recipe.derive import image_tags, tag_mark
from ..recipe.recipes import LoadedRecipe
from . import build, render, standin


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
    write_loaded(render.context_files(loaded, base_for(loaded, use_standin)), loaded, dest, dry_run)
    return dest


def write_loaded(files: dict[str, bytes], loaded: LoadedRecipe, dest: Path, dry_run: bool = False) -> None:
    if dry_run:
        for name, data in files.items():
            print(f"would write {dest / name} ({len(data)} bytes)")
        return
    render.write_context(files, dest)
    say(f"rendered {loaded.id} into {dest} ({len(files)} files)")


def check_names(repo: str, extra: list[str] | None = None) -> None:
    """--repo and --tag checked against Docker's grammar before anything is built (a dry run too)."""
    said = grammar.image_ref_problem(repo, name_only=True)
    if said:
        raise UsageError(f"--repo {repo!r} is not a repository name: {said}")
    for tag in extra or []:
        said = grammar.image_ref_problem(tag)
        if said:
            raise UsageError(f"--tag {tag!r} is not an image tag: {said}",
                             hint="e.g. --tag registry.example/org/name:1.0")


def tags_for(loaded: LoadedRecipe, repo: str, mark: str, content_hash: str, extra: list[str] | None = None,
             ) -> list[str]:
    """The image's tags: exact (content hash) and moving, then the extra ones; every one carries the
    mark of an image that is never published (a stand-in is never mistaken for a Gaudi image)."""
    check_names(repo, extra)
    tags = image_tags(repo, loaded.id, loaded.recipe.base.vllm_gaudi.version, content_hash, mark)
    for tag in extra or []:
        if mark and mark not in tag:
            tag += f"-{mark}"
        tags.append(tag)
    return tags


def moving_tag(loaded: LoadedRecipe, repo: str = IMAGE_REPO, use_standin: bool = False) -> str:
    """The recipe's moving tag, `<repo>/<id>:<release>[-standin]`, as `invoke build` tags the image and
    serve, docs, publish and the chain name it."""
    check_names(repo)
    return image_tags(repo, loaded.id, loaded.recipe.base.vllm_gaudi.version, "", tag_mark(use_standin, False))[1]


def require_written(loaded: LoadedRecipe, selection: fixes.Selection, use_standin: bool,
                    allow_unwritten: bool) -> None:
    """An image on the real base never claims a fix it does not hold (the stand-in says standin)."""
    missing = selection.not_written
    if use_standin or allow_unwritten or not missing:
        return
    raise BuildError(
        f"recipe {loaded.id} selects {len(missing)} fixes that are not written yet: {', '.join(missing)}; "
        "an image on the real base would claim fixes it does not hold",
        where=loaded.line_of(("fixes",)),
        hint="write them (invoke fixes.new), build on the stand-in (--standin), or for development only add "
             "--allow-unwritten-fixes (every tag then says -unwritten and the image is never published)")


def unwritten_note(loaded: LoadedRecipe) -> list[str]:
    """What `invoke validate` says of a recipe's fixes that are not written."""
    r = loaded.recipe
    missing = fixes.select(r.fixes.profile, r.fixes.opt_in).not_written
    if not missing:
        return []
    return [f"    not written: {', '.join(missing)} ({len(missing)} of the {len(loaded.fixes)} selected fixes): "
            "a build on the real base refuses them (--allow-unwritten-fixes for development)"]


def warn_moving_base(loaded: LoadedRecipe, base: render.Base) -> None:
    """FROM a tag the recipe does not pin by digest: say what was built on, and how to pin it."""
    if base.standin or loaded.recipe.base.digest:
        return
    got = f" (today {base.digest or base.image_id})" if base.image_id else ""
    say(f"warning: {loaded.line_of(('base', 'image'))}: building FROM {base.image}, a tag that moves{got}; "
        f"pin base.digest in releases/{loaded.release.release}.yaml (or in the recipe's base) to build on a known "
        "base (the image records the digest it was built on)")


def ensure_standin(loaded: LoadedRecipe, dry_run: bool = False, rebuild: bool = False) -> render.Base:
    return standin.ensure(loaded.release.pins(), loaded.release.profile, dry_run=dry_run, rebuild=rebuild)


def standin_task(ref: str, rebuild: bool = False, dry_run: bool = False) -> None:
    """`invoke standin`: the recipe's stand-in base made (or found), its image printed."""
    print(ensure_standin(recipes.load(ref), dry_run=dry_run, rebuild=rebuild).image)


def validate(ref: str | None, check_names) -> None:
    """`invoke validate`: the recipe (every recipe without `ref`) loaded and checked, `check_names` (the smoke
    checks', from the prove stage) included; and what a build would say of its unwritten fixes."""
    for loaded in [recipes.load(ref)] if ref else recipes.load_all():
        check_names(loaded)
        print(f"ok  {loaded.id}  ({loaded.rel_path}, sha256 {loaded.hash[:12]})")
        for line in unwritten_note(loaded):
            print(line)


def build_recipe(ref: str, use_standin: bool = False, tag: list[str] | None = None, repo: str = IMAGE_REPO,
                 dry_run: bool = False, allow_unwritten: bool = False) -> build.Built | None:
    loaded = recipes.load(ref)
    base = base_for(loaded, use_standin)
    require_written(loaded, fixes.select(loaded.recipe.fixes.profile, loaded.recipe.fixes.opt_in), use_standin,
                    allow_unwritten)
    allow_unwritten = allow_unwritten and not use_standin  # a stand-in is marked and never published anyway
    mark = tag_mark(use_standin, allow_unwritten)
    context = render.default_out(loaded, use_standin)
    if dry_run:
        warn_moving_base(loaded, base)
        c = engine.client()
        if use_standin:
            ensure_standin(loaded, dry_run=True)
        else:
            print(f"docker pull {base.from_ref}   # unless present")
        print(f"invoke render --recipe {loaded.id}{' --standin' if use_standin else ''}  # into {context}, "
              "with the base's resolved digest; <sha256> is that context's content hash")
        tags = tags_for(loaded, repo, mark, "<sha256>", tag)
        labels = build.build_labels("<sha256>", tags[0], revision())
        print(("DOCKER_BUILDKIT=1 " if c.buildkit else "DOCKER_BUILDKIT=0 ")
              + shlex.join([c.path, *build.build_command(context, buildkit=c.buildkit, labels=labels)]))
        for t in tags:
            print(f"{c.path} tag <image-id> {t}")
        return None
    engine.require_daemon()
    if use_standin:
        ensure_standin(loaded)
    build.ensure_base(base)
    base = build.resolve_base(base)
    warn_moving_base(loaded, base)
    files = render.context_files(loaded, base, allow_unwritten=allow_unwritten)  # the recipe as loaded above
    write_loaded(files, loaded, context)
    content = render.content_hash(files)
    tags = tags_for(loaded, repo, mark, content, tag)
    built = build.build(context, tags, base, build.build_labels(content, tags[0], revision()))
    print(f"image    {built.image_id}")
    for t in built.tags:
        print(f"tag      {t}")
    print(f"size     {build.mib(built.size)}  (base {base.from_ref}: {build.mib(built.base_size)})")
    print(f"adds     {build.mib(built.added)} over its base")
    return built


def test_image(ref: str, image: str | None, use_standin: bool, repo: str, dry_run: bool = False) -> None:
    """`invoke test`: the image checks on `image` (default the recipe's moving tag), evidence written, then
    the verdict (imagecheck.verdict)."""
    from . import imagecheck

    loaded = recipes.load(ref)
    image = image or moving_tag(loaded, repo, use_standin)
    imagecheck.verdict(imagecheck.run(loaded, image, base_for(loaded, use_standin), dry_run=dry_run), image)


def fetch_upstream(ref: str, source: str | None = None, wheel: str | None = None, dry_run: bool = False) -> None:
    loaded = recipes.load(ref)
    pins = loaded.release.pins()
    upstream.fetch_vllm_gaudi(pins, source or upstream.GITHUB, dry_run=dry_run)
    upstream.fetch_vllm(pins, Path(wheel) if wheel else None, dry_run=dry_run)
