"""A release is one file of data (releases/<tag>.yaml): its loader, and what recipes and profiles take from it."""

import shutil

import pytest
import yaml

from cookbook.host.errors import FixError, RecipeError
from cookbook.host.paths import FIXES, RELEASES
from cookbook.recipe import fixes, recipes, release

from ..conftest import DELETE, variant


@pytest.mark.parametrize("names,ordered", [
    (["v0.26.0"], ["v0.26.0"]),
    (["v0.28.0", "v0.9.0", "v0.26.0"], ["v0.9.0", "v0.26.0", "v0.28.0"]),  # by number, not by text
    (["v0.27.0", "v0.27.0-test", "v0.26.0"], ["v0.26.0", "v0.27.0-test", "v0.27.0"]),  # a suffix is a pre-release
    (["v1.0", "v0.99.1"], ["v0.99.1", "v1.0"]),
    (["nightly", "v0.26.0"], ["nightly", "v0.26.0"]),  # no version at all sorts first, never as the default
])
def test_releases_sort_by_version(names, ordered):
    assert sorted(names, key=release.order_key) == ordered


def test_the_v0_26_0_release_is_the_contract():
    rel = release.load("v0.26.0")
    assert (rel.vllm_gaudi.tag, rel.vllm_gaudi.version) == ("v0.26.0", "0.26.0")
    assert rel.vllm_gaudi.commit == "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
    assert rel.vllm.commit.startswith("568afb3a") and "ffd46bfab" in rel.vllm.accepted_commits
    assert (rel.gaudi_sw, rel.profile, rel.base.python) == ("1.24.1", "v0.26.0", "3.12")
    assert rel.pins().vllm_gaudi_version == "v0.26.0" and release.default().release == "v0.26.0"


@pytest.fixture
def releases(tmp_path, monkeypatch):
    """A copy of releases/ that COOKBOOK_RELEASES_DIR points at; returns (root, write(name, changes))."""
    root = tmp_path / "releases"
    shutil.copytree(RELEASES, root)
    monkeypatch.setenv("COOKBOOK_RELEASES_DIR", str(root))

    def write(name: str, changes: dict | None = None, text: str | None = None):
        data = yaml.safe_load((RELEASES / "v0.26.0.yaml").read_text())
        data["release"] = name
        for key, value in (changes or {}).items():
            node = data
            *parents, last = key.split(".")
            for part in parents:
                node = node[part]
            node.pop(last) if value is DELETE else node.__setitem__(last, value)
        (root / f"{name}.yaml").write_text(text if text is not None else yaml.safe_dump(data, sort_keys=False))

    return root, write


# (case, the file's name, changes to a copy of v0.26.0's file, words of the refusal, its key)
REFUSED = [
    ("a short commit", "v0.30.0", {"vllm_gaudi.commit": "b059f9c"}, "should match pattern", "vllm_gaudi.commit"),
    ("an unknown key", "v0.30.0", {"vllm.sha": "x"}, "unknown key", "vllm.sha"),
    ("no profile", "v0.30.0", {"profile": DELETE}, "Field required", "profile"),
    ("a profile climbing out", "v0.30.0", {"profile": "../x"}, "a name here", "profile"),
    ("a digest that is not one", "v0.30.0", {"base.digest": "sha256:abc"}, "should match pattern", "base.digest"),
    ("another release's name", "v0.30.0", {"release": "v0.31.0"}, "says it is release 'v0.31.0'", "release"),
]


@pytest.mark.parametrize("case,name,changes,words,key", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_bad_release_file_is_refused_with_file_key_and_line(releases, case, name, changes, words, key):
    write = releases[1]
    write(name, changes)
    with pytest.raises(RecipeError) as err:
        release.load(name)
    text = str(err.value)
    assert words in text and f"(key {key})" in text
    assert f"{name}.yaml:" in text or words == "Field required"  # a key that is not there has no line


def test_an_unknown_release_names_the_known_ones(releases):
    with pytest.raises(RecipeError) as err:
        release.load("v9.9.9")
    assert "unknown release 'v9.9.9'" in str(err.value) and "known releases: v0.26.0" in str(err.value)


def test_the_newest_release_is_the_default(releases):
    root, write = releases
    write("v0.27.0-test", {"profile": "v0.27.0-test"})
    assert release.default().release == "v0.27.0-test"
    assert release.profile_or_default(None) == "v0.27.0-test" and release.profile_or_default("x") == "x"


def test_a_recipe_takes_its_base_and_profile_from_its_release(recipe_tree):
    root, write = recipe_tree
    loaded = recipes.load(write(variant({})), root)
    rel = release.load("v0.26.0")
    assert loaded.release == rel and loaded.recipe.fixes.profile == rel.profile
    assert loaded.recipe.base.vllm_gaudi.commit == rel.vllm_gaudi.commit and loaded.recipe.base.image == rel.base.image
    # the image fields may be said over the release's; the recipe's hash covers what the release filled in
    other = recipes.load(write(variant({"base": {"image": "localhost/base:1", "python": "3.11"}}), model="M2"), root)
    assert (other.recipe.base.image, other.recipe.base.python) == ("localhost/base:1", "3.11")
    assert other.recipe.base.site_packages == rel.base.site_packages and other.hash != loaded.hash


@pytest.mark.parametrize("changes,words,key", [
    ({"base.gaudi_sw": "1.24.1"}, "base.gaudi_sw is release v0.26.0's to say", "base.gaudi_sw"),
    ({"base.vllm_gaudi": {"version": "v0.26.0", "commit": "b" * 40}}, "is release v0.26.0's", "base.vllm_gaudi"),
    ({"release": DELETE}, "a recipe names its release", "release"),
    ({"release": "v9.9.9"}, "unknown release 'v9.9.9'", "release"),
    ({"release": "../../etc"}, "unknown release", "release"),
])
def test_a_recipe_that_misnames_its_release_is_refused_at_the_key(recipe_tree, changes, words, key):
    root, write = recipe_tree
    with pytest.raises(RecipeError) as err:
        recipes.load(write(variant(changes)), root)
    text = str(err.value)
    assert words in text and f"(key {key})" in text and "recipe.yaml" in text


def test_a_profile_of_another_release_is_refused(recipe_tree, releases, tmp_path, monkeypatch):
    pack = tmp_path / "fixes"
    shutil.copytree(FIXES / "profiles", pack / "profiles")
    (pack / "profiles" / "v0.27.0-test.yaml").write_text(
        (FIXES / "profiles" / "v0.26.0.yaml").read_text().replace("release: v0.26.0", "release: v0.27.0-test"))
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", str(pack))
    releases[1]("v0.27.0-test", {"profile": "v0.27.0-test"})
    root, write = recipe_tree
    with pytest.raises(RecipeError) as err:
        recipes.load(write(variant({"fixes.profile": "v0.27.0-test"})), root)
    assert "is release v0.27.0-test's, and the recipe's release is v0.26.0" in str(err.value)
    assert "(key fixes.profile)" in str(err.value)


def test_a_profile_takes_its_pins_from_its_release_and_may_not_repeat_them(releases, tmp_path):
    pack = tmp_path / "fixes"
    (pack / "profiles").mkdir(parents=True)
    profile = pack / "profiles" / "p.yaml"
    profile.write_text("release: v0.26.0\norder: []\n")
    spec = fixes.load_profile("p", pack)
    assert spec.packages["vllm_gaudi"].commit == release.load("v0.26.0").vllm_gaudi.commit
    assert spec.packages["vllm"].accepted_commits and spec.gaudi_sw == "1.24.1"
    profile.write_text("release: v0.26.0\norder: []\ngaudi_sw: 1.24.2\n")
    with pytest.raises(FixError) as err:
        fixes._load_profile.cache_clear()
        fixes.load_profile("p", pack)
    assert "`gaudi_sw` is release v0.26.0's to say" in str(err.value) and "p.yaml:3" in str(err.value)
    # a pack for no release (the tests' CPU image) pins its packages itself, or is refused
    profile.write_text("release: cpu\norder: []\n")
    fixes._load_profile.cache_clear()
    with pytest.raises(FixError, match="names release 'cpu', which has no release file"):
        fixes.load_profile("p", pack)


@pytest.mark.parametrize("keys,file,key", [
    (("base", "image"), "releases/v0.26.0.yaml:", "base.image"),
    (("base", "vllm_gaudi", "commit"), "releases/v0.26.0.yaml:", "vllm_gaudi.commit"),
    (("fixes", "profile"), "releases/v0.26.0.yaml:", "profile"),
    (("fixes", "opt_in"), "recipes/Qwen/Qwen3.5-27B-FP8/recipe.yaml:", "fixes.opt_in"),
])
def test_a_value_left_to_the_release_is_located_in_the_release_file(keys, file, key):
    text = recipes.load("qwen3.5-27b-fp8").line_of(keys)
    assert file in text and f"(key {key})" in text
