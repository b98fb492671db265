"""`invoke publish`: push a checked image to a registry under its content tag and the moving tags,
read the manifest back, and attach its SBOM and provenance.

What may be published is one pure function, `refusals()`, which lists every reason at once:
stand-in images, images with unwritten fixes (or built with --allow-unwritten-fixes), recipes
without a pinned base digest, images of another version of the recipe, and a content tag that
already holds a different image. The same image again is a no-op:
identity is the image id (the manifest's config digest), which is the same on every machine
whatever compression a push chose.

No evidence file is trusted: right before the push, publish runs the image checks (imagecheck, the
suite `invoke test` runs) on the exact image id, and `evidence_problems()` judges that run's result.
The name given is resolved to an image id once; the checks, the content tag, the push, the SBOM and
the provenance all work on that id, so a name re-pointed meanwhile cannot mix two images. The moving
tags move last, after the read-back, the attachments and the digest file.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..host import engine
from ..host.errors import CheckFailure, ImageMissing, PublishError, UsageError
from ..host.names import IMAGE_REPO, OCI, Label
from ..host.progress import say
from ..image import imagecheck, steps
from ..recipe import fixes, recipes
from ..recipe.derive import image_tags
from ..recipe.recipes import LoadedRecipe
from . import registry, supply

MOVING = ("latest",)  # besides the vllm-gaudi version


@dataclass(frozen=True)
class Facts:
    """What the refusals are decided on, gathered at the edges (the checks are judged apart, by
    evidence_problems, on a run made after these refusals let the image through)."""

    recipe: str
    recipe_hash: str
    recipe_base_digest: str | None
    image_id: str
    labels: dict[str, str]
    remote_image_id: str | None  # the image id the content tag holds at the registry, if any
    content_ref: str


def refusals(f: Facts, allow_standin: bool = False) -> list[str]:
    """Every reason the image may not be published; empty when it may. Pure, table-tested.
    `allow_standin` is for the tests' loopback registry only; the task never sets it."""
    out = []
    labels = f.labels
    standin = labels.get(Label.STANDIN) != "false"
    if standin and not allow_standin:
        out.append(f"it is a stand-in image ({Label.STANDIN}={labels.get(Label.STANDIN, '<missing>')}): "
                   "stand-in images are never published as Gaudi images")
    if labels.get(Label.FIXES_NOT_WRITTEN):
        out.append(f"its fixes are not all written ({Label.FIXES_NOT_WRITTEN}: {labels[Label.FIXES_NOT_WRITTEN]})")
    if labels.get(Label.ALLOW_UNWRITTEN, "false") != "false":
        out.append(f"it was built with --allow-unwritten-fixes ({Label.ALLOW_UNWRITTEN}="
                   f"{labels[Label.ALLOW_UNWRITTEN]})")
    if not out and labels.get(Label.PUBLISHABLE) != "true" and not (standin and allow_standin):
        out.append(f"it says it may not be published ({Label.PUBLISHABLE}="
                   f"{labels.get(Label.PUBLISHABLE, '<missing>')})")
    if labels.get(Label.RECIPE) != f.recipe or labels.get(Label.RECIPE_HASH) != f.recipe_hash:
        out.append(f"it was built from another recipe or another version of {f.recipe} "
                   f"(label {labels.get(Label.RECIPE)} {labels.get(Label.RECIPE_HASH, '')[:12]}, "
                   f"recipe {f.recipe_hash[:12]}): build it again")
    if not f.recipe_base_digest:
        out.append("the recipe does not pin its base by digest (base.digest, in its release file or its own "
                   "base): a published image must say exactly what it was built on")
    elif not standin and labels.get(OCI.BASE_DIGEST) != f.recipe_base_digest:
        out.append(f"its {OCI.BASE_DIGEST} label ({labels.get(OCI.BASE_DIGEST, '<missing>')}) is not the "
                   f"recipe's base.digest {f.recipe_base_digest}")
    if f.remote_image_id and f.remote_image_id != f.image_id:
        out.append(f"{f.content_ref} already holds a different image ({f.remote_image_id[:19]}, this one "
                   f"{f.image_id[:19]}): content tags are immutable")
    return out


def remote_tags(content_tag: str, version: str, standin: bool) -> tuple[str, list[str]]:
    """The content tag and the moving ones. Stand-in images (tests only) say so in every tag."""
    suffix = "-standin" if standin else ""
    return content_tag, [f"{version}{suffix}", *(f"{m}{suffix}" for m in MOVING)]


@dataclass(frozen=True)
class Published:
    repository: str
    digest: str
    tags: list[str]
    changed: list[str]  # what this run wrote; empty on a re-push of the same image
    sbom: Path | None
    provenance: Path | None


def write_digest(done: Published, path: str) -> None:
    """`REPOSITORY@DIGEST` into PATH (temp file, then rename): what a CI signing step signs."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(f"{done.repository}@{done.digest}\n")
    tmp.replace(out)


def evidence_problems(report: dict, image_id: str, recipe_hash: str, suite: str, labels: dict[str, str],
                      allow_standin: bool = False) -> list[str]:
    """Whether a check run is evidence enough to publish IMAGE_ID: it names this image, this recipe
    version and this check suite; it ran every check and each passed (a stand-in may skip the Gaudi
    ones, and a stand-in is published only by the tests); and the image and the checkout that judged
    it are a known commit, not an unknown or dirty one. Pure, table-tested."""
    out = []
    if report.get("image_id") != image_id:
        out.append(f"the checks ran on image {str(report.get('image_id'))[:19]}, not {image_id[:19]}")
    if report.get("recipe_hash") != recipe_hash:
        out.append("the checks were of another version of the recipe")
    if report.get("suite_sha256") != suite:
        out.append(f"the checks were another suite ({str(report.get('suite_sha256'))[:12]}), not this "
                   f"checkout's ({suite[:12]})")
    standin = report.get("standin") is not False
    if standin and not allow_standin:
        out.append("the checks were of a stand-in image")
    checks = report.get("checks") or []
    allowed = {"passed", "skipped"} if standin and allow_standin else {"passed"}
    if not checks:
        out.append("no check ran")
    bad = [f"{c.get('check')} {c.get('outcome')}" for c in checks if c.get("outcome") not in allowed]
    if bad:
        out.append("checks not passed: " + ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
    if report.get("pytest_exit") != 0 or report.get("passed") is not True:
        out.append(f"the check run did not pass (pytest exit {report.get('pytest_exit')})")
    for what, rev in (("image was built from", labels.get(OCI.REVISION)),
                      ("checks ran from", report.get("revision"))):
        if not rev or rev.endswith("-dirty"):
            out.append(f"the {what} {'an unknown' if not rev else 'an uncommitted (' + rev[:19] + ')'} checkout: "
                       "a release names the commit it came from (commit, then build and publish again)")
    return out


def publish(ref: str, target: str, *, image: str | None = None, standin: bool = False,
            repo: str = IMAGE_REPO, dry_run: bool = False, sbom: bool = True,
            allow_standin: bool = False, moving_tags: bool = True, digest_file: str | None = None
            ) -> Published | None:
    if not target:
        raise UsageError("invoke publish needs --registry HOST[:PORT][/NAMESPACE]",
                         hint="e.g. invoke publish --recipe qwen3.5-27b-fp8 --registry ghcr.io/my-org")
    registry.split_target(target)  # a registry that is not one is refused before any work
    loaded = recipes.load(ref)
    image = image or steps.moving_tag(loaded, repo, standin)
    if dry_run:
        content_tag = content_tag_from(image, resolve(image, loaded)[1] if engine.image_exists(image) else None,
                                       loaded, standin)
        with registry.credentials(registry.split_target(target)[0]) as creds:
            reg = registry.Registry(target, creds)
            content, moving = remote_tags(content_tag, loaded.recipe.base.vllm_gaudi.version, standin)
            return _dry_run(reg, loaded, image, reg.repo(loaded.id), content, moving if moving_tags else [], creds,
                            sbom)
    # The one lookup of the name: from here on everything works on this id and these labels.
    image_id, labels = resolve(image, loaded)
    content, moving = remote_tags(content_tag_from(image, labels, loaded, standin),
                                  loaded.recipe.base.vllm_gaudi.version, standin)
    with registry.credentials(registry.split_target(target)[0]) as creds:
        reg = registry.Registry(target, creds)
        repository = reg.repo(loaded.id)
        content_ref = f"{repository}:{content}"
        facts = Facts(loaded.id, loaded.hash, loaded.recipe.base.digest, image_id, labels, None, content_ref)
        # What the image itself says decides first, without a word to the registry; then the tag.
        _refuse(image, image_id, repository, refusals(facts, allow_standin=allow_standin))
        remote = reg.inspect(content_ref)
        if remote:
            facts = dataclasses.replace(facts, remote_image_id=remote.config_digest)
            _refuse(image, image_id, repository, refusals(facts, allow_standin=allow_standin))
        report = run_checks(loaded, image_id, labels)
        _refuse(image, image_id, repository, [
            f"its image checks, run now, do not allow it: {p}"
            for p in evidence_problems(report, image_id, loaded.hash, imagecheck.suite_hash(), labels,
                                       allow_standin=allow_standin)])
        return _push(reg, loaded, image_id, labels, repository, content, moving if moving_tags else [], remote,
                     creds, sbom, report, digest_file)


def resolve(image: str, loaded: LoadedRecipe) -> tuple[str, dict[str, str]]:
    """NAME (or id) -> (image id, labels), from one `docker inspect`."""
    engine.require_daemon()
    try:
        info = engine.inspect(image)
    except ImageMissing:  # a name to mend (exit 2), as everywhere an image is missing
        raise ImageMissing(f"no local image {image}", hint=f"build and check it first: invoke build --recipe "
                           f"{loaded.id}, then invoke test --recipe {loaded.id}") from None
    return info["Id"], info["Config"].get("Labels") or {}


def run_checks(loaded: LoadedRecipe, image_id: str, labels: dict[str, str]) -> dict:
    """The image checks on IMAGE_ID now (they also file the evidence under it); an image whose checks
    cannot even start (no shell, no `sleep`: the lifecycle's CheckFailure) is refused, not a traceback."""
    say(f"running the image checks on {image_id[:19]} before the push")
    base = steps.base_for(loaded, labels.get(Label.STANDIN) != "false")
    try:
        return imagecheck.run(loaded, image_id, base).report
    except CheckFailure as exc:
        raise PublishError(f"{image_id[:19]} may not be published: its image checks could not run: {exc.what}") \
            from None


def _refuse(image: str, image_id: str, repository: str, problems: list[str]) -> None:
    if problems:
        raise PublishError(f"{image} ({image_id[:19]}) may not be published to {repository}:\n  - "
                           + "\n  - ".join(problems))


def _push(reg, loaded: LoadedRecipe, image_id: str, labels: dict, repository: str, content: str, moving: list[str],
          remote, creds, with_sbom: bool, report: dict, digest_file: str | None) -> Published:
    changed = []
    if remote is None:
        say(f"pushing {image_id[:19]} to {repository}:{content} (credentials: {creds.source})")
        digest = reg.push_image(image_id, f"{repository}:{content}")
        changed.append(content)
    else:
        digest = remote.digest
        say(f"{repository}:{content} already holds this image ({digest[:19]}): not pushed again")
    pushed = reg.inspect(f"{repository}@{digest}")
    _verify(pushed, image_id, labels, digest)
    sbom_path = prov_path = None
    if with_sbom:
        sbom_path, prov_path = _attach(reg, loaded, image_id, labels, repository, pushed, creds, changed, report)
    done = Published(repository, digest, [content, *moving], changed, sbom_path, prov_path)
    if digest_file:
        write_digest(done, digest_file)
    # Last: a failure above leaves the moving tags where they were, never on a half-published image.
    for tag in moving:
        current = reg.inspect(f"{repository}:{tag}")
        if current is None or current.digest != digest:
            reg.tag(repository, digest, tag)
            changed.append(tag)
    print(f"digest   {digest}")
    for tag in [content, *moving]:
        print(f"pushed   {repository}:{tag}")
    print(f"pull     docker pull {repository}@{digest}")
    if not changed:
        print("no change: the registry already held this image, its tags and its attachments")
    return done


def _verify(pushed, image_id: str, labels: dict, digest: str) -> None:
    """The manifest read back must be the one pushed, of this image, with these labels."""
    if pushed is None or pushed.digest != digest:
        raise PublishError(f"the registry does not serve {digest} after the push")
    if pushed.config_digest != image_id:
        raise PublishError(f"the pushed manifest's config is {pushed.config_digest[:19]}, "
                           f"not the image {image_id[:19]}")
    if pushed.labels != labels:
        differ = sorted(k for k in set(labels) | set(pushed.labels) if labels.get(k) != pushed.labels.get(k))
        raise PublishError(f"the pushed image's labels differ from the local image's: {', '.join(differ)}")


def _attach(reg, loaded, image_id, labels, repository, pushed, creds, changed, report) -> tuple[Path, Path]:
    """SBOM and provenance beside the image's evidence, each attached once to the pushed manifest."""
    folder = imagecheck.evidence_path(image_id).parent
    sbom_path, prov_path = folder / "sbom.spdx.json", folder / "provenance.json"
    for kind, path, media_type in (("sbom", sbom_path, supply.SBOM_MEDIA_TYPE),
                                   ("prov", prov_path, supply.PROVENANCE_MEDIA_TYPE)):
        tag = supply.attachment_tag(pushed.digest, kind)
        if reg.exists(f"{repository}:{tag}"):
            continue
        if kind == "sbom":
            if not path.is_file():
                say(f"SBOM of {image_id[:19]} (syft)")
                supply.sbom(image_id.removeprefix("sha256:"), path)
        else:
            # The evidence of the checks this run made, from memory: the file may have been replaced since.
            supply.write_json(supply.provenance(
                repository=repository, manifest_digest=pushed.digest, image_id=image_id, labels=labels,
                evidence=report, evidence_sha256=fixes.fixplan.sha256_bytes(
                    (json.dumps(report, indent=2) + "\n").encode())),
                path)
        supply.attach(reg.host, repository, pushed.digest, pushed.media_type, pushed.size, path, media_type, kind,
                      creds)
        changed.append(tag)
        say(f"attached {path.name} as {repository}:{tag}")
    return sbom_path, prov_path


def content_tag_from(image: str, labels: dict[str, str] | None, loaded, standin: bool) -> str:
    """`<release>-<content hash prefix>[-standin]`, from the resolved image's `cookbook.content.hash`;
    labels None: a dry run with no such local image, which shows where the hash goes."""
    content = "<sha256>" if labels is None else labels.get(Label.CONTENT_HASH)
    if not content:
        raise PublishError(f"{image} has no {Label.CONTENT_HASH} label: it was not built by `invoke build`",
                           hint=f"invoke build --recipe {loaded.id}")
    return image_tags("r", loaded.id, loaded.recipe.base.vllm_gaudi.version, content,
                      "standin" if standin else "")[0].rsplit(":", 1)[1]


def _dry_run(reg, loaded, image, repository, content, moving, creds, with_sbom) -> None:
    print(f"# credentials: {creds.source}")
    print(f"docker image inspect {image}   # once: the image id and labels; everything below uses the id")
    print(f"skopeo inspect --raw docker://{repository}:{content}   # must be absent or this same image")
    print("# the image checks, as invoke test runs them, on the image id; refused unless every one passes:")
    imagecheck.run(loaded, "<image-id>", None, dry_run=True)
    print(" ".join(reg.push_command("<image-id>", f"{repository}:{content}")))
    print(f"skopeo inspect --raw docker://{repository}@<digest>   # read back: digest, config = image id, labels")
    if with_sbom:
        print(" ".join(supply.syft_command("<image-id>", Path("<evidence>/sbom.spdx.json"))))
        for kind in ("sbom", "prov"):
            print(f"oras attach {repository}:sha256-<digest hex>.{kind} --subject {repository}@<digest>")
    for tag in moving:  # last
        print(f"skopeo copy --preserve-digests docker://{repository}@<digest> docker://{repository}:{tag}")
    return None
