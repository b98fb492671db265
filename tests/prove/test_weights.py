"""cookbook/prove/weights.py: the model into the host's Hugging Face cache, verified against the Hub's hashes, with
the real huggingface_hub client talking to a stand-in Hub on 127.0.0.1 (tests/fake_hub.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
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
    weights._drop(snap / "tokenizer.json")
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


def test_an_interrupted_download_resumes(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # The client writes 10 MB chunks; smaller here, so the cut half way lands after written chunks.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    hub.cut_once.add("model.safetensors")
    got = weights.fetch(REPO, str(tmp_path / "hf"), tmp_path / "weights.json")
    assert got.status == "fetched"
    ranges = [r.range for r in gets(hub, "model.safetensors")]
    half = len(model_files()["model.safetensors"]) // 2
    assert ranges == [None, f"bytes={half}-"]  # the second GET asks for the rest only


def test_a_download_that_gives_up_leaves_nothing_half_written(hub, tmp_path, monkeypatch):
    """The connection keeps dying at the same byte: the client's retries give up, the step fails (the network's
    fault, exit 3) with nothing of that file left; the next run keeps the files already verified and fetches
    that one again from its start (huggingface_hub 2.x resumes within a download, not across runs)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
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
