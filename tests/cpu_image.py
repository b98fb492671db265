"""The CPU test recipe built into an image by the real pipeline (`invoke build`'s steps.build_recipe) on
the vLLM CPU base (cookbook/image/cpubase.py), for the `--image` runs of tests/prove/test_bench.py.

The recipe is the smoke tests' CPU recipe with a fix profile of no fixes (the pack patches vllm-gaudi,
which a CPU image does not hold); its base is the CPU base's content-keyed tag, so it is written when
the test runs. Kept with the tests: never a published recipe.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from .conftest import reference_data
from .cpu_server import TEST_RECIPE

PROFILE = "cpu-none"
# The trained model is mounted here and served under the recipe's model id (COOKBOOK_MODEL_PATH).
MODEL_IN_IMAGE = "/models/tiny"


def write_pack(root: Path) -> Path:
    """A fix pack whose one profile selects nothing and pins no package (COOKBOOK_FIXES_DIR)."""
    (root / "profiles").mkdir(parents=True, exist_ok=True)
    (root / "profiles" / f"{PROFILE}.yaml").write_text(yaml.safe_dump(
        {"release": "cpu", "packages": {}, "gaudi_sw": "none", "order": []}))
    return root


def recipe(base_image: str) -> dict:
    """The smoke tests' CPU recipe (tests/data/recipes/Test/Tiny-Qwen3-CPU) on the CPU base, with no fixes,
    the CPU server's environment, and the reference page's performance scenarios."""
    data = yaml.safe_load(TEST_RECIPE.read_text())
    data["title"] = "Tiny Qwen3 on the vLLM CPU base (tests only)"
    data["hardware"]["accelerator"] = "cpu"  # its pages may show its CPU figures (measured.misplaced)
    # the image fields over its release's base (the pins stay the release's)
    data["base"] = {"image": base_image, "python": "3.11", "site_packages": "/usr/local/lib/python3.11/dist-packages"}
    data["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    data["fixes"] = {"profile": PROFILE, "opt_in": []}
    data["performance"] = copy.deepcopy(reference_data()["performance"])
    return data


def write_recipe(folder: Path, base_image: str) -> Path:
    path = folder / "Test" / "Tiny-Qwen3-CPU-Image" / "recipe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe(base_image), sort_keys=False))
    return path


def build(root: Path, repo: str) -> tuple[Path, list[str], Path]:
    """The recipe built by the real pipeline on the CPU base, in `root`: (recipe path, its tags, fix pack).
    Skips (or fails under CI) when there is no CPU base to build on."""
    import pytest

    from cookbook.host.errors import BuildError
    from cookbook.image import cpubase, steps

    from .conftest import unavailable

    try:
        base = cpubase.ensure()
    except BuildError as exc:  # no CPU vLLM environment (no registry), no mmdebstrap or Debian mirror
        unavailable(f"no vLLM CPU base image: {exc}")
    pack = write_pack(root / "pack")
    path = write_recipe(root / "recipes", base.image)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(pack))
        built = steps.build_recipe(str(path), repo=repo)
    return path, built.tags, pack

