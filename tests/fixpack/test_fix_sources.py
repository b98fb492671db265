"""cookbook/fixpack/fix_sources.py: pristine files staged for fix work, and one patch run by the image's
own patch tool inside the staging copy (real files in a temporary folder, a real git or patch)."""

import pytest

from cookbook.fixpack import fix_sources
from cookbook.host.errors import FixError
from cookbook.recipe.fixes import FixSpec, Target, load_profile

PATCH = """\
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 2
"""


@pytest.fixture
def roots(tmp_path):
    vllm = tmp_path / "cache" / "vllm"
    (vllm / "pkg").mkdir(parents=True)
    (vllm / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (vllm / "top.py").write_text("x = 1\n")
    return {"vllm": vllm, "vllm_gaudi": tmp_path / "cache" / "vllm_gaudi"}


def test_stage_copies_each_file_under_its_package(tmp_path, roots):
    dest = tmp_path / "staging"
    fix_sources.stage(roots, {("vllm", "pkg/mod.py"), ("vllm", "top.py")}, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.py")) == ["vllm/pkg/mod.py", "vllm/top.py"]
    assert (dest / "vllm" / "top.py").read_text() == "x = 1\n"


def test_stage_refuses_a_file_the_release_has_not(tmp_path, roots):
    with pytest.raises(FixError, match="vllm_gaudi/gone.py is not in the release's sources"):
        fix_sources.stage(roots, {("vllm", "top.py"), ("vllm_gaudi", "gone.py")}, tmp_path / "staging")


def test_apply_patch_runs_the_images_patch_tool_in_the_staging_copy(tmp_path, roots):
    staging, folder = tmp_path / "staging", tmp_path / "fixes"
    fix_sources.stage(roots, {("vllm", "pkg/mod.py")}, staging)
    (folder / "a-fix").mkdir(parents=True)
    (folder / "a-fix" / "0001.patch").write_text(PATCH)
    target = staging / "vllm" / "pkg" / "mod.py"

    def run(**kw):
        return fix_sources.apply_patch(folder, "a-fix", "0001.patch", "vllm", staging, **kw)

    assert run(check_only=True)[0] and "return 1" in target.read_text()  # a check changes nothing
    assert run()[0] and target.read_text() == "def f():\n    return 2\n"
    ok, said = run()  # twice: it no longer applies, and the tool says why
    assert not ok and said
    assert run(reverse=True)[0] and target.read_text() == "def f():\n    return 1\n"
    assert (roots["vllm"] / "pkg" / "mod.py").read_text() == "def f():\n    return 1\n"  # the cache untouched


def test_targets_of_is_every_file_of_every_fix_once():
    def spec(*targets):
        return FixSpec.model_construct(targets=[Target(package=p, files=files) for p, files in targets])

    specs = {"a": spec(("vllm", {"x.py": "0" * 64}), ("vllm_gaudi", {"y.py": "1" * 64})),
             "b": spec(("vllm", {"x.py": "0" * 64, "z.py": "2" * 64}))}
    assert fix_sources.targets_of(specs) == {("vllm", "x.py"), ("vllm", "z.py"), ("vllm_gaudi", "y.py")}
    assert fix_sources.targets_of({}) == set()


def test_package_roots_are_the_release_sources_in_the_upstream_cache(upstream_cache):
    roots = fix_sources.package_roots(load_profile("v0.26.0"))
    assert set(roots) == {"vllm", "vllm_gaudi"}
    assert (roots["vllm"] / "__init__.py").is_file() and (roots["vllm_gaudi"] / "__init__.py").is_file()
