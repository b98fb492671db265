"""The cookbook's names, said once: its image repository, the label keys its images and containers carry,
and where the Hugging Face cache is on the host and in the image.

Images, registries and results already made carry these strings: a value here never changes (a new key
may be added). The image checks (cookbook/image/image_checks/) read the same keys from here.
"""

from __future__ import annotations

PROJECT = "gaudi-cookbook"  # the per-user cache folder, media types, the SBOM's builder
IMAGE_REPO = PROJECT  # local images: gaudi-cookbook/<recipe id>:<release>[-<content hash>]

HF_CACHE_HOST = "~/.cache/huggingface"  # the host's Hub cache, mounted into a served container by default
HF_CACHE_IN_IMAGE = "/root/.cache/huggingface"  # the image runs as root; the Hub client caches here


class Label:
    """The cookbook's label keys: on images (render.labels, build.build_labels) and on containers."""

    RECIPE = "cookbook.recipe"
    RECIPE_HASH = "cookbook.recipe.hash"
    MODEL = "cookbook.model"
    VLLM_GAUDI_VERSION = "cookbook.vllm-gaudi.version"
    VLLM_GAUDI_COMMIT = "cookbook.vllm-gaudi.commit"
    VLLM_VERSION = "cookbook.vllm.version"
    VLLM_COMMIT = "cookbook.vllm.commit"
    GAUDI_SW = "cookbook.gaudi-sw"
    PROFILE = "cookbook.fixes.profile"
    FIXES = "cookbook.fixes"
    FIXES_NOT_WRITTEN = "cookbook.fixes.not-written"
    MANIFEST_HASH = "cookbook.manifest.hash"
    CONTENT_HASH = "cookbook.content.hash"  # the build context's hash, added by the build
    BASE_ID = "cookbook.base.id"
    STANDIN = "cookbook.standin"
    # The stand-in base's layout version (standin.LAYOUT): a base of an older layout is built again.
    STANDIN_LAYOUT = "cookbook.standin.layout"
    # The build's own verdict ("false" on every stand-in and every image with an unwritten fix); publish
    # checks it on top of its own reasons, so an image a newer render refused is refused here too.
    PUBLISHABLE = "cookbook.publishable"
    ALLOW_UNWRITTEN = "cookbook.allow-unwritten-fixes"  # built with --allow-unwritten-fixes: runs, never published
    # On containers: what started one (serve, smoke, bench, image-check, fixes-verify, lab).
    CONTAINER = "cookbook.container"
    IMAGE_CHECK = "cookbook.image-check"  # an image-check container: the recipe it checks
    CHECK_RUN = "cookbook.check-run"  # on every container of one `invoke test` run
    INSTANCE = "cookbook.instance"  # one value per container made: found by it when its id was not written


class OCI:
    """The OCI image annotations the cookbook sets (as labels) and reads."""

    TITLE = "org.opencontainers.image.title"
    DESCRIPTION = "org.opencontainers.image.description"
    VENDOR = "org.opencontainers.image.vendor"
    VERSION = "org.opencontainers.image.version"
    REVISION = "org.opencontainers.image.revision"
    BASE_NAME = "org.opencontainers.image.base.name"
    BASE_DIGEST = "org.opencontainers.image.base.digest"
