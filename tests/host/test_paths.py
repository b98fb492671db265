"""cookbook/host/paths.py: the checkout's folders, and the cache and fix pack the environment points to
(table driven over the environment variables that move them)."""

from pathlib import Path

import pytest

from cookbook.host import paths


def test_the_checkout_holds_its_folders():
    assert (paths.ROOT / "cookbook" / "host" / "paths.py").is_file()
    for folder in (paths.RECIPES, paths.FIXES, paths.DOCKERFILES):
        assert folder.is_dir() and folder.parent == paths.ROOT
    assert (paths.ENGINE / "apply.py").is_file() and paths.ENGINE.parent == paths.ROOT  # the checkout's applier


@pytest.mark.parametrize("env,want", [
    ({"COOKBOOK_CACHE": "/c/cookbook", "XDG_CACHE_HOME": "/x"}, "/c/cookbook"),  # COOKBOOK_CACHE first
    ({"XDG_CACHE_HOME": "/x"}, "/x/gaudi-cookbook"),
    ({"COOKBOOK_CACHE": "", "XDG_CACHE_HOME": ""}, "{home}/.cache/gaudi-cookbook"),  # empty is unset
    ({}, "{home}/.cache/gaudi-cookbook"),
])
def test_cache_dir(monkeypatch, tmp_path, env, want):
    for name in ("COOKBOOK_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.cache_dir() == Path(want.format(home=tmp_path))


def test_fixes_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("COOKBOOK_FIXES_DIR", raising=False)
    assert paths.fixes_dir() == paths.FIXES
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", str(tmp_path / "pack" / ".." / "pack"))
    assert paths.fixes_dir() == (tmp_path / "pack").resolve()  # resolved: the same pack is one path
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", "")
    assert paths.fixes_dir() == paths.FIXES
