"""The upstream source cache: fetched with real git from a repository the test makes, and from a wheel."""

import os
import subprocess
import zipfile

import pytest

from cookbook.host import upstream
from cookbook.host.errors import UpstreamError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def origin(tmp_path):
    """A git repository shaped like vllm-gaudi, with the release tag."""
    repo = tmp_path / "origin"
    (repo / "vllm_gaudi").mkdir(parents=True)
    (repo / "vllm_gaudi" / "__init__.py").write_text("# vllm_gaudi\n")

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    git("tag", "v0.26.0")
    return repo, git("rev-parse", "HEAD").strip()


def test_fetch_from_a_local_repository(cache, origin):
    repo, commit = origin
    pins = upstream.Pins("v0.26.0", commit, "0.26.0")
    dest = upstream.fetch_vllm_gaudi(pins, str(repo))
    assert (dest / "vllm_gaudi" / "__init__.py").read_text() == "# vllm_gaudi\n"
    assert upstream.is_complete(dest) and dest.parent.parent == cache / "upstream"
    assert upstream.fetch_vllm_gaudi(pins, "/nonexistent") == dest  # cached: no fetch at all


def test_tag_at_another_commit_is_refused(cache, origin):
    repo, _ = origin
    with pytest.raises(UpstreamError, match="not the pinned"):
        upstream.fetch_vllm_gaudi(upstream.Pins("v0.26.0", "f" * 40, "0.26.0"), str(repo))
    assert not any((cache / "upstream" / "vllm-gaudi").glob("f*"))  # nothing half-made


def test_unreachable_source_names_from(cache):
    with pytest.raises(UpstreamError) as err:
        upstream.fetch_vllm_gaudi(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"), "/nonexistent/repo")
    assert "--from" in str(err.value)
    assert list((cache / "upstream" / "vllm-gaudi").iterdir()) == []


def test_vllm_python_files_from_a_wheel(cache, tmp_path):
    wheel = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/__init__.py", "")
        z.writestr("vllm/_version.py", "__commit_id__ = commit_id = 'gffd46bfab'\n")
        z.writestr("vllm/_C.abi3.so", b"\x7fELF")
        z.writestr("vllm-0.26.0.dist-info/METADATA", "Name: vllm\nVersion: 0.26.0\n")
    dest = upstream.fetch_vllm(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"), wheel)
    assert (dest / "vllm" / "_version.py").exists() and (dest / "vllm-0.26.0.dist-info" / "METADATA").exists()
    assert not (dest / "vllm" / "_C.abi3.so").exists()  # Python files only


def test_empty_cache_refusal_names_the_command(cache):
    with pytest.raises(UpstreamError) as err:
        upstream.require(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"))
    assert "invoke upstream.fetch" in str(err.value)


@pytest.mark.parametrize("source,shown", [
    ("https://user:ghp_secret@github.com/vllm-project/vllm-gaudi.git", "https://***@github.com/vllm-project/vllm-gaudi.git"),
    ("https://github.com/vllm-project/vllm-gaudi.git", "https://github.com/vllm-project/vllm-gaudi.git"),
    ("/srv/mirror/vllm-gaudi", "/srv/mirror/vllm-gaudi"),
])
def test_credentials_never_reach_logs(source, shown):
    assert upstream.redact(source) == shown


def test_failed_fetch_message_hides_credentials(cache):
    with pytest.raises(UpstreamError) as err:
        upstream.fetch_vllm_gaudi(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"), "file://me:hunter2@/nonexistent")
    assert "hunter2" not in str(err.value)


def test_fetch_any_ref_and_find_it_again_by_name(cache, origin):
    repo, commit = origin
    dest = upstream.fetch_ref("v0.26.0", str(repo))
    assert dest.name == commit and (dest / "vllm_gaudi" / "__init__.py").is_file()
    assert upstream.cached_ref("v0.26.0") == dest and upstream.cached_ref(commit) == dest
    assert upstream.fetch_ref("v0.26.0", "/nonexistent") == dest  # cached: no fetch at all
    assert upstream.cached_ref("v9.9.9") is None


def test_fetch_a_commit(cache, origin):
    repo, commit = origin
    dest = upstream.fetch_ref(commit, f"file://{repo}")
    assert dest.name == commit and "ref" not in (dest / upstream.MARKER).read_text()


def test_unknown_ref_is_named_as_such(cache, origin):
    repo, _ = origin
    with pytest.raises(UpstreamError) as err:
        upstream.fetch_ref("v9.9.9", str(repo))
    assert "couldn't find remote ref refs/tags/v9.9.9" in str(err.value) and "40-hex commit" in str(err.value)


# ------------------------------------------------------------ a hostile source: deadline and size bound

@pytest.fixture
def hostile():
    from tests import hostile_http

    server, url = hostile_http.start()
    yield url
    server.shutdown()


def commit_all(repo) -> str:
    """Commit what the test added to the origin; the new commit."""
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "more"],
                   check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def left_behind(cache):
    """What a failed fetch left in the cache: nothing, not even its temporary folder."""
    return [p.name for p in (cache / "upstream").glob("*/*")]


def test_a_source_that_trickles_ends_at_the_deadline_through_the_task(cache, hostile):
    from tests.test_tasks import invoke_env

    out = invoke_env("upstream.fetch", "--from", f"{hostile}/drip/vllm-gaudi.git",
                     COOKBOOK_CACHE=str(cache), COOKBOOK_UPSTREAM_TIMEOUT="2")
    assert out.returncode == 3, out.stderr
    assert "not done within the deadline of 2s" in out.stderr and "COOKBOOK_UPSTREAM_TIMEOUT" in out.stderr
    assert "Traceback" not in out.stderr and left_behind(cache) == []


def test_a_repository_larger_than_the_bound_is_refused(cache, origin, monkeypatch):
    repo, _ = origin
    (repo / "weights.bin").write_bytes(os.urandom(3 << 20))
    monkeypatch.setenv("COOKBOOK_UPSTREAM_MAX_MB", "1")
    head = commit_all(repo)
    with pytest.raises(UpstreamError, match=r"(more than 1 MB written|lists 3 MB of files)"):
        upstream.fetch_ref(head, str(repo))
    assert left_behind(cache) == []


def pip_from(monkeypatch, index: str) -> None:
    """pip reads this index only: no config file, no find-links of the machine's own."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", index)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("mode,bound,said", [
    ("pypi-flood", ("COOKBOOK_UPSTREAM_MAX_MB", "5"), "more than 5 MB written"),
    ("drip", ("COOKBOOK_UPSTREAM_TIMEOUT", "3"), "not done within the deadline of 3s"),
])
def test_an_index_that_floods_or_trickles_is_cut(cache, hostile, monkeypatch, mode, bound, said):
    pip_from(monkeypatch, f"{hostile}/{mode}/simple")
    monkeypatch.setenv(*bound)
    with pytest.raises(UpstreamError, match=said):
        upstream.fetch_vllm(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"))
    assert left_behind(cache) == []


def test_a_wheel_listing_more_than_the_bound_is_not_unpacked(cache, tmp_path, monkeypatch):
    wheel = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:  # 12 MB of zeros: a few KB packed
        z.writestr("vllm/big.py", b"0" * (12 << 20))
    monkeypatch.setenv("COOKBOOK_UPSTREAM_MAX_MB", "10")
    with pytest.raises(UpstreamError, match="lists 12 MB of files, more than the bound of 10 MB"):
        upstream.fetch_vllm(upstream.Pins("v0.26.0", "a" * 40, "0.26.0"), wheel=wheel)
    assert left_behind(cache) == []


@pytest.mark.parametrize("name,value", [("COOKBOOK_UPSTREAM_TIMEOUT", "soon"), ("COOKBOOK_UPSTREAM_MAX_MB", "-1"),
                                        ("COOKBOOK_UPSTREAM_MAX_MB", "nan")])
def test_a_bound_that_is_not_a_number_is_a_usage_error(cache, origin, monkeypatch, name, value):
    from cookbook.host.errors import UsageError

    monkeypatch.setenv(name, value)
    repo, commit = origin
    with pytest.raises(UsageError, match=f"{name}={value} is not a number"):
        upstream.fetch_vllm_gaudi(upstream.Pins("v0.26.0", commit, "0.26.0"), str(repo))


def test_a_tree_with_a_link_out_of_it_is_refused(cache, origin):
    repo, _ = origin
    (repo / "vllm_gaudi" / "inside").symlink_to("__init__.py")  # a link within the tree is fine
    (repo / "vllm_gaudi" / "passwd").symlink_to("/etc/passwd")
    head = commit_all(repo)
    with pytest.raises(UpstreamError, match=r"link out of its tree: vllm_gaudi/passwd -> /etc/passwd"):
        upstream.fetch_ref(head, str(repo))
    assert left_behind(cache) == []
