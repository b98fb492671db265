"""The recipe's rules at run time: the entrypoint reads its final command and environment back into
the recipe and runs the rules of `invoke validate` on them, with the same code (cookbook/runtime.py),
before anything starts. Then the image's PID 1: signals passed on, children reaped."""

import json
import shlex
import subprocess
import sys
import time

import pytest

from cookbook import derive, engine, recipes, render, runtime, schema

from . import hostile

RID = "qwen3.5-27b-fp8"
SAFE_ENV = {"PT_HPU_LAZY_MODE": "0", "VLLM_COMPACT_GDN": "1"}  # what the image's ENV gives

# (case, user args, run-time env, the rule expected to refuse or None, words of its message)
CASES = [
    ("the recipe as it is", [], {}, None, None),
    ("a harmless override", ["--max-num-seqs", "16", "--port", "9000"], {}, None, None),
    ("3584 batched tokens at 256K", ["--max-num-batched-tokens", "3584"], {}, "batched-tokens-at-256k-on-gaudi2",
     "PT_DEVMEM OOM"),
    ("the same, with =", ["--max-num-batched-tokens=3584"], {}, "batched-tokens-at-256k-on-gaudi2", "3584"),
    ("the same, with underscores", ["--max_num_batched_tokens", "3584"], {}, "batched-tokens-at-256k-on-gaudi2",
     "3584"),
    ("the same, abbreviated", ["--max-num-batched", "3584"], {}, "batched-tokens-at-256k-on-gaudi2", "3584"),
    ("not whole hybrid blocks", ["--max-num-batched-tokens", "2048"], {}, "batched-tokens-whole-hybrid-blocks",
     "896"),
    ("COMPACT_GDN=0", [], {"VLLM_COMPACT_GDN": "0"}, "gdn-fix-needs-compact-gdn", "VLLM_COMPACT_GDN=1"),
    ("lazy mode", [], {"PT_HPU_LAZY_MODE": "1"}, "no-lazy-mode-for-gdn-hybrids", "compile mode"),
    ("prefix caching off is fine", ["--no-enable-prefix-caching", "--max-num-batched-tokens", "2048"], {},
     None, None),
    ("too many images", ["--limit-mm-per-prompt", '{"image": 17}'], {}, "image-limit-fits-context", "17 images"),
    ("too many images, dotted", ["--limit-mm-per-prompt.image", "17"], {}, "image-limit-fits-context", "17 images"),
    ("buckets below max-num-seqs", [], {"VLLM_DECODE_BS_BUCKET_MAX": "16"}, "buckets-cover-serve", "below"),
    ("context past native", ["--max-model-len", "524288"], {}, "context-within-native", "native context"),
    ("the last flag wins", ["--max-num-batched-tokens", "3584", "--max-num-batched-tokens", "1792"], {}, None, None),
]


@pytest.fixture(scope="module")
def data():
    return render.runtime_data(recipes.load(RID))


def command(args):
    return derive.serve_command(recipes.load(RID).recipe) + args


@pytest.mark.parametrize("case,args,env,rule,words", CASES, ids=[c[0] for c in CASES])
def test_runtime_rules(data, case, args, env, rule, words):
    errors, found, _ = runtime.check(data, command(args), {**SAFE_ENV, **env})
    assert errors == []
    if rule is None:
        assert found == []
    else:
        assert rule in {f.rule for f in found}
        assert any(words in f.message for f in found if f.rule == rule)


@pytest.mark.parametrize("args,words", [
    (["--port", "abc"], "--port takes a whole number, got 'abc'"),
    (["--port", "0"], "--port must be at least 1"),
    (["--port=70000"], "--port must be at most 65535"),
    (["--max-num-seqs", "many"], "--max-num-seqs takes a whole number"),
    (["--gpu-memory-utilization", "1.5"], "must be at most 1"),
    (["--gpu-memory-utilization", "0"], "must be above 0"),
    (["--limit-mm-per-prompt", "[1]"], "takes a JSON object"),
    (["--max-num-seqs"], "needs a value"),
])
def test_bad_values_are_named(data, args, words):
    errors, _, _ = runtime.check(data, command(args), SAFE_ENV)
    assert any(words in e.message for e in errors), errors


def test_the_port_is_read_from_the_command(data):
    assert runtime.check(data, command(["--port", "9001"]), SAFE_ENV)[2] == 9001
    assert runtime.check(data, command([]), SAFE_ENV)[2] is None


def test_recipe_flags_read_back_as_the_recipe(data):
    """The flags a recipe renders parse back into its serve values: the run-time check starts from
    exactly what `invoke validate` saw."""
    for rid in recipes.known_ids():
        r = recipes.load(rid).recipe
        serve, errors, _ = runtime.parse_serve(derive.serve_args(r.serve), {}, render.serve_flags())
        assert errors == []
        assert {k: v for k, v in serve.items()} == {k: v for k, v in r.serve.model_dump().items()
                                                     if v is not None and v is not False
                                                     or (v is False and k in derive.NEGATABLE_FLAGS)}


def test_schema_fields_read_as_attributes():
    """runtime.View reads dict keys as attributes; a schema field named like a dict method would not."""
    def fields(model):
        for name, f in model.model_fields.items():
            yield name
            for arg in getattr(f.annotation, "__args__", (f.annotation,)):
                if isinstance(arg, type) and issubclass(arg, schema.Strict):
                    yield from fields(arg)
    assert not set(fields(schema.Recipe)) & set(dir(dict))


# --- The rendered entrypoint, run here with the standard library alone (-I -S: no site-packages) ---

@pytest.fixture(scope="module")
def context(tmp_path_factory):
    out = tmp_path_factory.mktemp("ctx") / "ctx"
    loaded = recipes.load(RID)
    render.write_context(render.context_files(loaded, render.vault_base(loaded)), out)
    return out


def entrypoint(context, *args, env=None):
    return subprocess.run([sys.executable, "-I", "-S", str(context / "entrypoint.py"), *args], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", **SAFE_ENV, **(env or {})}, timeout=60)


def test_entrypoint_refuses_with_the_rule_and_its_reason(context):
    out = entrypoint(context, "--cookbook-dry-run", "--max-num-batched-tokens", "3584")
    assert out.returncode == 2 and out.stdout == ""
    assert "refused by rule batched-tokens-at-256k-on-gaudi2 (--max-num-batched-tokens)" in out.stderr
    assert "COOKBOOK_ALLOW_UNSAFE=1" in out.stderr and "Traceback" not in out.stderr


def test_allow_unsafe_starts_with_a_warning(context):
    out = entrypoint(context, "--cookbook-dry-run", "--max-num-batched-tokens", "3584",
                     env={"COOKBOOK_ALLOW_UNSAFE": "1"})
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout)[-2:] == ["--max-num-batched-tokens", "3584"]
    assert "WARNING: COOKBOOK_ALLOW_UNSAFE=1" in out.stderr and "batched-tokens-at-256k-on-gaudi2" in out.stderr


@pytest.mark.parametrize("env,rule", [({"VLLM_COMPACT_GDN": "0"}, "gdn-fix-needs-compact-gdn"),
                                      ({"PT_HPU_LAZY_MODE": "1"}, "no-lazy-mode-for-gdn-hybrids")])
def test_entrypoint_refuses_a_forbidden_environment(context, env, rule):
    out = entrypoint(context, "--cookbook-dry-run", env=env)
    assert out.returncode == 2 and f"refused by rule {rule} (env {next(iter(env))})" in out.stderr


def test_bad_port_is_a_message_not_a_traceback(context):
    out = entrypoint(context, "--cookbook-dry-run", "--port", "abc")
    assert out.returncode == 2 and "--port takes a whole number, got 'abc'" in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_supervisor_passes_sigterm_on(context):
    """PID 1's loop, here as an ordinary process: SIGTERM reaches the child and its status comes back."""
    code = (f"import sys; sys.path.insert(0, {str(context)!r}); import entrypoint; "
            "sys.exit(entrypoint.supervise([sys.executable, '-c', 'import time; time.sleep(60)']))")
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", code])
    time.sleep(1.0)
    start = time.monotonic()
    proc.terminate()
    assert proc.wait(timeout=10) == 128 + 15
    assert time.monotonic() - start < 5


# --- In a real image (the stand-in build of tests/hostile.py) -----------------------------------------

def run(image, *args, flags=()):
    return engine.docker("run", "--rm", *flags, image, *args, check=False, timeout=120)


@pytest.mark.docker
def test_image_port_reaches_vllm_serve(hostile_image):
    out = run(hostile_image.image_id, "--cookbook-dry-run")
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout)[-2:] == ["--port", str(hostile.PORT)]


@pytest.mark.docker
@pytest.mark.parametrize("args,flags,rule", [
    (["--max-num-batched-tokens", "3584"], (), "batched-tokens-at-256k-on-gaudi2"),
    ([], ("-e", "VLLM_DECODE_BS_BUCKET_MAX=16"), "buckets-cover-serve"),
])
def test_image_refuses_what_the_page_forbids(hostile_image, args, flags, rule):
    out = run(hostile_image.image_id, *args, flags=flags)
    assert out.returncode == 2 and f"refused by rule {rule}" in out.stderr, out.stderr
    unsafe = run(hostile_image.image_id, *args, flags=(*flags, "-e", "COOKBOOK_ALLOW_UNSAFE=1", "-e",
                                                        "COOKBOOK_DRY_RUN=1"))
    assert unsafe.returncode == 0 and "WARNING: COOKBOOK_ALLOW_UNSAFE=1" in unsafe.stderr


@pytest.mark.docker
@pytest.mark.parametrize("flags,code,words", [
    ((), 3, "stand-in image"),
    (("--read-only",), 2, "add --tmpfs /tmp"),
    (("--read-only", "--tmpfs", "/tmp"), 2, "cannot write the Hugging Face cache"),
    (("--read-only", "--tmpfs", "/tmp", "--tmpfs", "/root/.cache"), 3, "cannot serve"),
])
def test_started_for_real_it_says_why_in_one_line(hostile_image, flags, code, words):
    out = run(hostile_image.image_id, flags=flags)
    assert out.returncode == code, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr
    assert len([line for line in out.stderr.splitlines() if line.startswith("entrypoint:")]) == 1


@pytest.mark.docker
def test_docker_stop_ends_the_container_within_the_grace_period(hostile_image):
    """PID 1 is the image's own entrypoint code, supervising a small stand-in server that leaves an
    orphan behind; `docker stop` must end it by SIGTERM (143), not by the SIGKILL after the grace."""
    server = "(sleep 0.2 &); exec python3 -m http.server 9000 --bind 127.0.0.1"
    code = ("import sys; sys.path.insert(0, '/opt/cookbook'); import entrypoint; "
            f"sys.exit(entrypoint.supervise(['sh', '-c', {server!r}]))")
    cid = engine.docker("run", "-d", "--entrypoint", "python3", hostile_image.image_id, "-c", code).stdout.strip()
    try:
        probe = "import urllib.request as u; u.urlopen('http://127.0.0.1:9000/', timeout=1)"
        for _ in range(50):
            if engine.docker("exec", cid, "python3", "-c", probe, check=False).returncode == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the stand-in server did not answer")
        time.sleep(0.5)  # the orphaned sleep has ended by now; PID 1 must have reaped it
        states = engine.docker("exec", cid, "sh", "-c", "cat /proc/[0-9]*/stat").stdout
        assert not [line for line in states.splitlines() if line.split(") ", 1)[1].startswith("Z")], states
        start = time.monotonic()
        engine.docker("stop", "-t", "20", cid)
        elapsed = time.monotonic() - start
        state = json.loads(engine.docker("inspect", cid).stdout)[0]["State"]
        assert state["ExitCode"] == 128 + 15 and elapsed < 10, (state, elapsed)
    finally:
        engine.docker("rm", "-f", cid, check=False)
