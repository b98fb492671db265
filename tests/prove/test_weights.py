"""cookbook/prove/weights.py: the model into the host's Hugging Face cache, verified against the Hub's hashes, with
the step's own client talking to a stand-in Hub on 127.0.0.1 (tests/fake_hub.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cookbook.host.errors import CheckFailure, UsageError, WeightsError
from cookbook.prove import weights
from cookbook.recipe import recipes

from ..fake_hub import FakeHub, Repo, git_blob_id

REPO = "Org/Tiny-Model"
COMMIT = "a" * 40
SECRET = "hf_test_secret_value_1234567890"


def model_files() -> dict[str, bytes]:
    return {"config.json": b'{"model_type": "qwen3"}\n',
            "model.safetensors": bytes(range(256)) * 4096,  # 1 MiB, an LFS file
            "tokenizer.json": b'{"version": "1.0"}\n' * 50}


@pytest.fixture
def hub(monkeypatch):
    for name in (*weights.TOKEN_ENV, "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with FakeHub({REPO: Repo(COMMIT, model_files(), lfs={"model.safetensors"})}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def gets(hub: FakeHub, name: str) -> list:
    return [r for r in hub.requests if r.method == "GET" and r.path.endswith("/" + name)]


def test_git_blob_id_is_gits(tmp_path):
    (tmp_path / "f").write_bytes(b"hello\n")
    assert weights.git_blob_id(tmp_path / "f") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_a_fetch_verifies_lands_in_the_cache_and_a_second_run_asks_nothing(hub, tmp_path):
    cache, out = tmp_path / "hf", tmp_path / "build" / "weights.json"
    got = weights.fetch(REPO, str(cache), out)
    assert got.status == "fetched" and got.commit == COMMIT
    snap = weights.storage(cache / "hub", REPO) / "snapshots" / COMMIT
    for name, data in model_files().items():
        assert (snap / name).read_bytes() == data
    blob = Path(os.path.realpath(snap / "model.safetensors")).name
    assert blob == hashlib.sha256(model_files()["model.safetensors"]).hexdigest()
    assert (weights.storage(cache / "hub", REPO) / "refs" / "main").read_text() == COMMIT
    assert json.loads(out.read_text())["commit"] == COMMIT
    assert any(r.path == f"/api/models/{REPO}/revision/main" for r in hub.requests)

    hub.requests.clear()
    again = weights.fetch(REPO, str(cache), out)
    assert again.status == "present" and not hub.requests  # not one request


def test_a_cache_that_changed_since_the_record_is_checked_again(hub, tmp_path):
    cache, out = tmp_path / "hf", tmp_path / "weights.json"
    weights.fetch(REPO, str(cache), out)
    snap = weights.storage(cache / "hub", REPO) / "snapshots" / COMMIT
    Path(os.path.realpath(snap / "tokenizer.json")).unlink()  # its blob gone from the cache
    assert weights.present(out, REPO, "main", cache / "hub") is None
    hub.requests.clear()
    assert weights.fetch(REPO, str(cache), out).status == "fetched"
    assert [r.path for r in hub.requests if r.method == "GET" and "/resolve/" in r.path] == \
        [f"/{REPO}/resolve/{COMMIT}/tokenizer.json"]  # only the missing file is downloaded again


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])  # an LFS file (sha256), a small one (blob id)
def test_a_corrupted_file_is_refused_by_name_and_not_left_present(hub, tmp_path, name):
    cache, out = tmp_path / "hf", tmp_path / "weights.json"
    hub.corrupt.add(name)
    with pytest.raises(CheckFailure) as caught:
        weights.fetch(REPO, str(cache), out)
    assert f"{REPO}/{name} is not the Hub's file" in caught.value.what
    assert ("sha256" if name.endswith("safetensors") else "git blob id") in caught.value.what
    home = weights.storage(cache / "hub", REPO)
    assert not os.path.lexists(home / "snapshots" / COMMIT / name)
    blobs = [p.name for p in (home / "blobs").iterdir()]
    data = model_files()[name]
    assert hashlib.sha256(data).hexdigest() not in blobs and git_blob_id(data) not in blobs
    assert not out.exists()  # nothing recorded as verified
    hub.corrupt.clear()
    assert weights.fetch(REPO, str(cache), out).status == "fetched"


def test_an_interrupted_download_resumes(hub, tmp_path):
    hub.cut_once.add("model.safetensors")
    got = weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "weights.json")
    assert got.status == "fetched"
    ranges = [r.range for r in gets(hub, "model.safetensors")]
    half = len(model_files()["model.safetensors"]) // 2
    assert ranges == [None, f"bytes={half}-"]  # the second GET asks for the rest only


def test_a_download_that_gives_up_leaves_nothing_half_written(hub, tmp_path, monkeypatch):
    """The connection keeps dying at the same byte: the client's retries give up, the step fails (the network's
    fault, exit 3) with nothing of that file left; the next run keeps the files already verified and fetches
    that one again from its start (a partial file is resumed within a run, not across runs)."""
    monkeypatch.setattr("time.sleep", lambda s: None)  # the client's pause between its retries
    cache, out = tmp_path / "hf", tmp_path / "weights.json"
    half = len(model_files()["model.safetensors"]) // 2
    hub.stall_at["model.safetensors"] = half
    with pytest.raises(WeightsError) as caught:
        weights.fetch(REPO, str(cache), out)
    assert caught.value.exit_code == 3 and "finished files are kept" in caught.value.hint
    home = weights.storage(cache / "hub", REPO)
    assert not list((home / "blobs").glob("*.incomplete"))
    assert not os.path.lexists(home / "snapshots" / COMMIT / "model.safetensors") and not out.exists()
    hub.stall_at.clear()
    hub.requests.clear()
    assert weights.fetch(REPO, str(cache), out).status == "fetched"
    assert [r.range for r in gets(hub, "model.safetensors")] == [None] and not gets(hub, "config.json")


def test_a_401_without_a_token_says_to_set_hf_token(hub, tmp_path):
    hub.token = SECRET
    with pytest.raises(UsageError) as caught:
        weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "weights.json")
    assert "without a token (HTTP 401)" in caught.value.what and "HF_TOKEN" in caught.value.hint
    assert all(r.authorization is None for r in hub.requests)


def test_the_token_comes_from_the_environment_only(hub, tmp_path, monkeypatch):
    hub.token = SECRET
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))  # a token file of `hf auth login` is not read
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "token").write_text(SECRET)
    with pytest.raises(UsageError):
        weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "weights.json")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", SECRET)
    assert weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "weights.json").status == "fetched"


def test_the_step_through_invoke_serve_keeps_the_token_out_of_its_output(hub, tmp_path):
    """`invoke serve` fetches before it starts the container; the token is sent, never shown or written."""
    from cookbook.host.paths import ROOT

    hub.token = SECRET
    env = {**os.environ, "HF_TOKEN": SECRET, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    log_dir = tmp_path / "serve"
    out = subprocess.run([sys.executable, "-m", "invoke", "serve", "--recipe", str(tiny_hub_recipe(tmp_path)),
                          "--hf-cache", str(tmp_path / "hf"), "--log-dir", str(log_dir), "--runtime", "",
                          "--timeout", "5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert (log_dir / "weights-tiny-model.json").is_file(), out.stderr[-2000:]
    assert any(r.authorization == f"Bearer {SECRET}" for r in hub.requests)
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and "hf" not in p.parts)
    assert SECRET not in out.stdout + out.stderr + written
    assert "from HF_TOKEN" in out.stderr


def tiny_hub_recipe(tmp_path: Path) -> Path:
    """The tests' CPU recipe with a model from the (stand-in) Hub."""
    import yaml

    from ..cpu_server import TEST_RECIPE

    data = yaml.safe_load(TEST_RECIPE.read_text())
    data["model"].update(id=REPO, weights="hub")
    path = tmp_path / "recipes" / "Org" / "Tiny-Model" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_recipe_says_whether_there_is_anything_to_fetch(tmp_path):
    from ..cpu_server import TEST_RECIPE

    mounted = recipes.load(TEST_RECIPE, root=TEST_RECIPE.parents[2])
    hub_model = recipes.load("qwen3.6-27b-fp8")
    assert mounted.recipe.model.weights == "mounted" and hub_model.recipe.model.weights == "hub"
    assert weights.step(mounted, "~/.cache/huggingface", tmp_path / "w.json").status == "skipped"
    assert weights.skip_reason(hub_model, "") and weights.skip_reason(hub_model, "~/.cache/huggingface") is None
    said = weights.plan(hub_model, str(tmp_path / "hf"), tmp_path / "w.json")
    assert said.startswith(f"fetch Qwen/Qwen3.6-27B-FP8 at main into {tmp_path / 'hf' / 'hub'}")


# --- a hostile or broken Hub, through `invoke serve` --------------------------------------------------------

def invoke_serve(tmp_path: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """`invoke serve` on the stand-in Hub's model; no Docker engine answers, so it ends after the weights step
    (exit 3 there too: the tests read which step said what)."""
    from cookbook.host.paths import ROOT

    run_env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", **env}
    recipe = tmp_path / "recipes" / "Org" / "Tiny-Model" / "recipe.yaml"
    if not recipe.exists():
        tiny_hub_recipe(tmp_path)
    return subprocess.run([sys.executable, "-m", "invoke", "serve", "--recipe", str(recipe), "--hf-cache",
                           str(tmp_path / "hf"), "--log-dir", str(tmp_path / "serve"), "--runtime", "",
                           "--timeout", "5"], cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout)


def weights_error(out: subprocess.CompletedProcess) -> str:
    """The one error line, after checking the step failed cleanly: exit 3, no traceback, nothing recorded."""
    assert out.returncode == 3, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: weights: "), out.stderr[-2000:]
    return errors[0]


def victim(tmp_path: Path) -> Path:
    """A file outside the cache, where a `../..` from the model's snapshot or blob folder lands."""
    path = tmp_path / "victim" / "authorized_keys"
    path.parent.mkdir()
    path.write_text("ssh-ed25519 AAAA... keep me\n")
    return path


def test_a_commit_id_that_climbs_out_of_the_cache_is_one_line_and_touches_nothing(hub, tmp_path):
    """The listing's sha names the snapshot folder: `../../../../victim` from snapshots/ is outside the cache.
    It is not a commit id, so nothing is fetched, written or removed (huggingface_hub 2.4's own pointer check
    ended this one in a traceback; the ETag below went through)."""
    kept = victim(tmp_path)
    hub.repos[REPO].commit = "../../../../victim"
    hub.info_extra = {"siblings": [{"rfilename": "authorized_keys", "size": 5, "blobId": git_blob_id(b"other")}]}
    hub.repos[REPO].files["authorized_keys"] = b"other"
    out = invoke_serve(tmp_path)
    assert kept.read_text() == "ssh-ed25519 AAAA... keep me\n"
    said = weights_error(out)
    assert "commit" in said and "not 40 hex digits" in said
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").rglob("refs"))


def test_an_etag_that_climbs_out_of_the_cache_neither_writes_nor_deletes_there(hub, tmp_path):
    """huggingface_hub names a blob after the server's ETag; the step names it after the listing's hash, and a
    file that fails its check is dropped from the step's own partial file, never through a link."""
    kept = victim(tmp_path)
    hub.etag["config.json"] = "../../../../victim/authorized_keys"
    hub.corrupt.add("config.json")
    out = invoke_serve(tmp_path)
    assert kept.read_text() == "ssh-ed25519 AAAA... keep me\n"
    assert out.returncode == 1 and "config.json is not the Hub's file" in out.stderr, out.stderr[-2000:]
    home = weights.storage(tmp_path / "hf" / "hub", REPO)
    assert not os.path.lexists(home / "snapshots" / COMMIT / "config.json")
    hub.corrupt.clear()  # the mirror mended, the ETag still odd: the blob is named by its hash
    assert weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "w.json").status == "fetched"
    blob = Path(os.path.realpath(home / "snapshots" / COMMIT / "config.json"))
    assert blob == home / "blobs" / git_blob_id(model_files()["config.json"]) and kept.is_file()


@pytest.mark.parametrize("sibling, says", [
    ({"rfilename": "../../../../victim/authorized_keys", "size": 5, "blobId": "b" * 40}, "'..' part"),
    ({"rfilename": "/etc/passwd", "size": 5, "blobId": "b" * 40}, "not a relative path"),
    ({"rfilename": "a//b", "size": 5, "blobId": "b" * 40}, "empty"),
    ({"rfilename": "evil\x1b]0;owned\x07\x1b[2J.json", "size": 5, "blobId": "b" * 40}, "control character"),
    ({"rfilename": "model.bin", "blobId": "b" * 40}, "no size"),
    ({"rfilename": "model.bin", "size": "5", "blobId": "b" * 40}, "no size"),
    ({"rfilename": "model.bin", "size": 5, "blobId": "../x"}, "no git blob id"),
    ({"rfilename": "model.bin", "size": 5, "blobId": "b" * 40, "lfs": {"sha256": "../../x", "size": 5}}, "no sha256"),
    ({"rfilename": "model.bin", "size": 5, "blobId": "b" * 40, "lfs": {"sha256": "c" * 64, "size": 6}}, "two sizes"),
    ("model.bin", "not an object"),
])
def test_a_listing_that_is_not_the_apis_is_one_line_and_exit_3(hub, tmp_path, sibling, says):
    hub.info_extra = {"siblings": [hub.repos[REPO].sibling("config.json"), sibling]}
    kept = victim(tmp_path)
    said = weights_error(invoke_serve(tmp_path))
    assert says in said and "\x1b" not in said and "\x07" not in said
    assert kept.is_file() and not (tmp_path / "serve" / "weights-tiny-model.json").exists()


def test_hub_file_names_never_reach_the_terminal_raw(hub, tmp_path):
    """Whatever the listing holds, no escape sequence from it reaches stderr (rich passes them through)."""
    hub.info_extra = {"siblings": [hub.repos[REPO].sibling("config.json"),
                                   {"rfilename": "\x1b]0;owned\x07\x1b[31mred.json", "size": 5, "blobId": "b" * 40}]}
    out = invoke_serve(tmp_path)
    assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr
    weights_error(out)


@pytest.mark.parametrize("sha", ["v1.0", "A" * 40, "a" * 39])
def test_a_sha_that_is_not_a_commit_id_is_refused_and_never_written_to_refs_main(hub, tmp_path, sha):
    hub.repos[REPO].commit = sha  # the mirror serves the files at that name too
    out = invoke_serve(tmp_path)
    assert not list((tmp_path / "hf").rglob("refs/main"))
    assert "not 40 hex digits" in weights_error(out)


def test_a_trickling_mirror_meets_the_steps_deadline(hub, tmp_path):
    """A byte every half second keeps every read alive; the step's overall deadline ends it, exit 3, with
    the variable that sets it named, and no partial file left."""
    hub.trickle["model.safetensors"] = 0.5
    started = time.monotonic()
    said = weights_error(invoke_serve(tmp_path, timeout=90, COOKBOOK_WEIGHTS_TIMEOUT="4"))
    assert time.monotonic() - started < 60
    assert "deadline of 4s" in said and 0 < hub.sent["model.safetensors"] < 60
    blobs = weights.storage(tmp_path / "hf" / "hub", REPO) / "blobs"
    assert not list(blobs.glob("*.incomplete"))


def test_the_deadline_is_a_number_of_seconds(hub, tmp_path):
    out = invoke_serve(tmp_path, COOKBOOK_WEIGHTS_TIMEOUT="soon\x1b[2J")
    assert out.returncode == 2 and "COOKBOOK_WEIGHTS_TIMEOUT=soon" in out.stderr and "\x1b" not in out.stderr
    assert not hub.requests


def test_a_flooding_mirror_is_stopped_at_the_listed_size(hub, tmp_path):
    """config.json is listed at 24 bytes; the mirror sends 256 MB for it. The step stops reading past 24
    bytes: what left the server is what the sockets' buffers took, not the flood."""
    hub.flood["config.json"] = 256 << 20
    out = invoke_serve(tmp_path)
    assert hub.sent["config.json"] < 64 << 20
    assert "sent more than the 24 bytes" in weights_error(out)
    blobs = weights.storage(tmp_path / "hf" / "hub", REPO) / "blobs"
    assert sum(p.stat().st_size for p in blobs.iterdir()) == 0  # nothing of it kept


@pytest.mark.parametrize("name, says", [
    ("config.json", None), ("a/b/c.json", None), ("", "not a file name"), ("..", "'..' part"),
    ("a/../b", "'..' part"), ("./a", "'.' or '..' part"), ("/abs", "not a relative path"), ("a\\b", "not a relative"),
    ("a/", "empty"), ("x\x1b[2J", "control character"), ("x\n", "control character"), ("é/ü.json", None),
    ("x" * 256, "too long"), (None, "not a file name"),
])
def test_name_problem(name, says):
    got = weights.name_problem(name)
    assert (got is None) if says is None else (got is not None and says in got)


@pytest.mark.parametrize("planted", ["blobs", "snapshots", f"snapshots/{COMMIT}", "refs"])
def test_a_symlinked_folder_in_the_models_cache_is_refused_not_followed(hub, tmp_path, planted):
    """A folder of the model's cache that is a link elsewhere: the step writes nothing through it (exit 2)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = weights.storage(tmp_path / "hf" / "hub", REPO)
    (home / planted).parent.mkdir(parents=True)
    (home / planted).symlink_to(elsewhere)
    with pytest.raises(UsageError) as caught:
        weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "w.json")
    assert f"{home / planted} is a symlink" in caught.value.what and caught.value.exit_code == 2
    assert not list(elsewhere.iterdir())


def test_a_snapshot_link_out_of_the_cache_is_replaced_never_followed(hub, tmp_path):
    """A snapshot entry already in place that points outside the cache: its target is neither trusted, nor
    written, nor removed; the entry becomes a link to the verified blob."""
    kept = victim(tmp_path)
    snap = weights.storage(tmp_path / "hf" / "hub", REPO) / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(kept)
    assert weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "w.json").status == "fetched"
    assert kept.read_text() == "ssh-ed25519 AAAA... keep me\n"
    assert (snap / "config.json").read_bytes() == model_files()["config.json"]
    assert os.readlink(snap / "config.json") == f"../../blobs/{git_blob_id(model_files()['config.json'])}"


def test_the_endpoints_password_is_not_shown(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hub.url.replace("http://", "http://mirror-user:s3cret-pass@"))
    weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "w.json")
    assert "s3cret-pass" not in capsys.readouterr().err


def test_sigterm_in_the_download_leaves_no_partial_file(hub, tmp_path):
    """A CI cancel mid-file: `invoke serve` ends as on Ctrl-C, and the partial file it made is gone."""
    import signal

    from cookbook.host.paths import ROOT

    hub.trickle["model.safetensors"] = 0.2
    tiny_hub_recipe(tmp_path)
    blobs = weights.storage(tmp_path / "hf" / "hub", REPO) / "blobs"
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "serve", "--recipe",
                             str(tmp_path / "recipes" / "Org" / "Tiny-Model" / "recipe.yaml"), "--hf-cache",
                             str(tmp_path / "hf"), "--log-dir", str(tmp_path / "serve"), "--runtime", ""],
                            cwd=ROOT, env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(blobs.glob("*.incomplete")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(blobs.glob("*.incomplete")), "no download started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "Traceback" not in err, err[-2000:]
    assert not list(blobs.glob("*.incomplete"))


def test_the_token_is_not_sent_on_to_another_host(hub, tmp_path, monkeypatch):
    """The Hub answers a download with a redirect to its CDN: the files come from there, without the token."""
    monkeypatch.setenv("HF_TOKEN", SECRET)
    hub.token = SECRET
    with FakeHub({REPO: Repo(COMMIT, model_files(), lfs={"model.safetensors"})}) as cdn:
        hub.redirect_to = cdn.url.replace("127.0.0.1", "localhost")  # another host, as the CDN is
        assert weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "w.json").status == "fetched"
    assert {r.path.rsplit("/", 1)[1] for r in cdn.requests if r.method == "GET"} == set(model_files())
    assert all(r.authorization is None for r in cdn.requests)
    assert any(r.authorization == f"Bearer {SECRET}" for r in hub.requests)


def test_a_mirror_that_never_finishes_its_headers_meets_the_deadline(hub, tmp_path):
    """No chunk ever arrives to check the clock against; the deadline holds anyway."""
    hub.trickle_headers = True
    started = time.monotonic()
    said = weights_error(invoke_serve(tmp_path, timeout=90, COOKBOOK_WEIGHTS_TIMEOUT="3"))
    assert time.monotonic() - started < 60 and "deadline of 3s" in said
