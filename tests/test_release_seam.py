"""The release seam: a second release is two files of data (releases/<tag>.yaml and its fix profile), and the
recipe that names it validates, renders and gets its fix-lab tree without a line of code changed.

The synthetic release v0.27.0-test keeps v0.26.0's sources (so the upstream cache serves it) under another
tag, distribution version, Gaudi software version and base image, so everything that comes from the
release can be told from what v0.26.0 would have given.
"""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from cookbook.fixpack import fix_lab
from cookbook.host.names import IMAGE_REPO
from cookbook.host.paths import ENGINE, FIXES, RELEASES
from cookbook.image import render, steps
from cookbook.prove import smoke
from cookbook.recipe import fixes, recipes, release

from .conftest import reference_data

NEW = "v0.27.0-test"
IMAGE = "vault.habana.ai/gaudi-docker/1.25.0/ubuntu24.04/habanalabs/vllm-0.27.0-test:latest"


@pytest.fixture
def second_release(tmp_path, monkeypatch):
    """releases/ and fixes/ copies with v0.27.0-test added as data alone; a recipe naming it. Returns its path."""
    releases, pack = tmp_path / "releases", tmp_path / "fixes"
    shutil.copytree(RELEASES, releases)
    shutil.copytree(FIXES, pack, ignore=shutil.ignore_patterns("__pycache__"))
    data = yaml.safe_load((RELEASES / "v0.26.0.yaml").read_text())
    data.update(release=NEW, gaudi_sw="1.25.0", profile=NEW)
    data["vllm_gaudi"].update(tag=NEW, version="0.27.0")  # not the tag without its v: the file says which
    data["base"]["image"] = IMAGE
    (releases / f"{NEW}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    profile = yaml.safe_load((FIXES / "profiles" / "v0.26.0.yaml").read_text())
    (pack / "profiles" / f"{NEW}.yaml").write_text(yaml.safe_dump({**profile, "release": NEW}, sort_keys=False))
    monkeypatch.setenv("COOKBOOK_RELEASES_DIR", str(releases))
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", str(pack))
    recipe = reference_data() | {"release": NEW}
    path = tmp_path / "recipes" / "Test" / "Model-Next" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_a_second_release_validates_and_renders_as_data_alone(second_release, tmp_path):
    assert release.default().release == NEW  # the newest: every task's default profile is now its
    assert release.profile_or_default(None) == NEW
    loaded = recipes.load(second_release, second_release.parents[2])
    smoke.check_names(loaded)  # the rest of `invoke validate`
    base = loaded.recipe.base
    assert (base.vllm_gaudi.version, base.gaudi_sw, base.image, loaded.recipe.fixes.profile) == (
        NEW, "1.25.0", IMAGE, NEW)
    out = tmp_path / "context"
    steps.render_recipe(str(second_release), str(out), False, False)
    assert f"FROM {IMAGE}" in (out / "Dockerfile").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vllm_gaudi"]["version"] == NEW and manifest["gaudi_sw"] == "1.25.0"
    assert manifest["fixes"]["profile"] == NEW
    pack = json.loads((out / "fixes" / "pack.json").read_text())
    assert list(pack["profiles"]) == [NEW]
    assert pack["profiles"][NEW]["packages"]["vllm_gaudi"]["version"] == "0.27.0"
    assert pack["profiles"][NEW]["gaudi_sw"] == "1.25.0"
    labels = render.labels(manifest, "0" * 64)
    assert labels["cookbook.fixes.profile"] == NEW
    assert steps.image_tags(IMAGE_REPO, loaded.id, base.vllm_gaudi.version, "f" * 64)[1].endswith(f":{NEW}")


def test_the_lab_lays_out_the_second_release(second_release, tmp_path, upstream_cache):
    """The lab's tree is the release's sources under the release's versions: the pack's own applier (inimage.apply),
    given the profile's pins, finds them installed and every target pristine (--dry-run changes nothing)."""
    tree = fix_lab.make_tree(tmp_path / "tree", NEW)
    assert (tree / "vllm_gaudi-0.27.0.dist-info").is_dir()
    assert "0.27.0" in (tree / "vllm_gaudi" / "_version.py").read_text()
    pack, profile = tmp_path / "pack", fixes.load_profile(NEW)
    generic = [n for n in profile.order if n not in profile.opt_in and n in fixes.fix_names()]
    for rel, data in fixes.pack_files(NEW, generic).items():
        (pack / rel).parent.mkdir(parents=True, exist_ok=True)
        (pack / rel).write_bytes(data)
    proc = subprocess.run([sys.executable, "-B", "-m", "inimage.apply", "--profile", NEW, "--site", str(tree),
                           "--pack", str(pack / "pack.json"), "--dry-run"], capture_output=True, text=True,
                          cwd=ENGINE.parent)
    assert proc.returncode == 0, proc.stderr + proc.stdout
