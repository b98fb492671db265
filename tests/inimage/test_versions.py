"""inimage/versions.py: a fix's dependency ranges against the installed versions (PEP 440 releases,
no `packaging`), in --site DIR and then on the running Python's path."""

import pytest

from inimage import versions

from .tree import DEP, needs, refused


@pytest.mark.parametrize("installed", ["0.2.4", "0.2.9", "0.2.4.post1", "0.2.10+cpu", "0.3"])
def test_dependency_in_range_applies_and_is_recorded(cb, installed):
    needs(cb, "hybrid-decode-pad", {DEP: ">=0.2.4,<1.0"}, installed)
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["dists"] == {DEP: installed}


@pytest.mark.parametrize("installed", ["0.2.1", "0.2.4rc1", "0.2.4.dev3", "1.0.0"])
def test_dependency_out_of_range_refused(cb, installed):
    needs(cb, "hybrid-decode-pad", {DEP: ">=0.2.4,<1.0"}, installed)
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, f"hybrid-decode-pad needs {DEP}>=0.2.4,<1.0, found {DEP} {installed}: install")


def test_dependency_not_installed_refused(cb):
    needs(cb, "strict-think-end", {DEP: ">=0.2.4"})
    before = cb.snapshot()
    assert cb.apply().code == 0 and cb.run("--revert").code == 0  # not selected: not checked
    result = cb.apply("strict-think-end")
    refused(cb, before, result, f"strict-think-end needs {DEP}>=0.2.4, which is not installed in {cb.site}")


def test_dependency_found_on_the_running_pythons_path(cb):
    # With --site, what is not in DIR is looked for where the running Python imports from (the lab's case:
    # the release tree in DIR, its dependencies in the lab's environment).
    import importlib.metadata

    needs(cb, "hybrid-decode-pad", {"pytest": ">=1"})
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["dists"] == {"pytest": importlib.metadata.version("pytest")}


@pytest.mark.parametrize(("version", "spec", "inside"), [
    ("0.2.4", ">=0.2.4", True), ("0.2.3", ">=0.2.4", False), ("0.2.10", ">=0.2.4", True),
    ("0.2.4rc1", ">=0.2.4", False), ("0.2.4rc1", ">=0.2.3", True), ("0.2.4.0", "==0.2.4", True),
    ("0.2.4.post2", "<=0.2.4", True), ("1.0.0", "<1.0", False), ("0.9.9", "<1", True),
    ("0.2.9", "!=0.2.9", False), ("0.2.9", ">0.2.8,<0.3", True), ("v0.2.9", ">=0.2.4", True),
    ("unknown", ">=0", False),
])
def test_version_ranges_compare_releases(version, spec, inside):
    assert versions.in_range(version, spec) is inside
