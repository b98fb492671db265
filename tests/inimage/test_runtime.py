"""The recipe's rules at run time: the entrypoint reads its final command and environment back into
the recipe and runs the rules of `invoke validate` on them, with the same code (inimage/runtime.py),
before anything starts. Then the image's PID 1: signals passed on, children reaped."""

import ast
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cookbook.host import engine
from cookbook.image import render
from cookbook.recipe import derive, recipes, schema
from inimage import runtime, settings

from .. import hostile, multicard

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
    # vLLM 0.26.0's other spellings of the same flags: aliases, =value, abbreviations, --config
    ("-tp, vLLM's short name", ["-tp", "2"], {}, "tensor-parallel-matches-hardware", "--tensor-parallel-size 2"),
    ("-tp=2", ["-tp=2"], {}, "tensor-parallel-matches-hardware", "--tensor-parallel-size 2"),
    ("-t, an abbreviation of -tp", ["-t", "2"], {}, "tensor-parallel-matches-hardware", "--tensor-parallel-size 2"),
    ("-t=2", ["-t=2"], {}, "tensor-parallel-matches-hardware", "--tensor-parallel-size 2"),
    ("--tensor_parallel_size=2", ["--tensor_parallel_size=2"], {}, "tensor-parallel-matches-hardware", "size 2"),
    ("--tensor-par=2", ["--tensor-par=2"], {}, "tensor-parallel-matches-hardware", "size 2"),
    ("3.584k batched tokens", ["--max-num-batched-tokens", "3.584k"], {}, "batched-tokens-at-256k-on-gaudi2", "3584"),
    ("dotted, underscored", ["--limit_mm_per_prompt.image", "17"], {}, "image-limit-fits-context", "17 images"),
    ("dotted, abbreviated", ["--limit-mm.image=17"], {}, "image-limit-fits-context", "17 images"),
    ("a dotted value goes last", ["--limit-mm-per-prompt.image", "17", "--limit-mm-per-prompt", '{"image": 1}'], {},
     "image-limit-fits-context", "17 images"),
    ("-O3 is not a flag of ours", ["-O3", "--max-num-seqs", "16"], {}, None, None),
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


FLAGS = render.serve_flags()


def yaml_file(tmp_path, text, name="vllm.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# (case, words after `vllm serve MODEL` with {cfg} for a config file holding `config`, serve values read)
READ = [
    ("-q with its value attached", ["-qfp8"], None, {"quantization": "fp8"}),
    ("-q=", ["-q=fp8"], None, {"quantization": "fp8"}),
    ("--no- of a bool flag", ["--enable-prefix-caching", "--no-enable-prefix"], None, {"enable_prefix_caching": False}),
    ("a config file's values", ["--config", "{cfg}"], "tensor-parallel-size: 2\nmax_num_seqs: 8\n"
     "enable-prefix-caching: true\nlimit-mm-per-prompt: {image: 17}\n",
     {"tensor_parallel_size": 2, "max_num_seqs": 8, "enable_prefix_caching": True,
      "limit_mm_per_prompt": {"image": 17}}),
    ("the command wins over the config", ["--config", "{cfg}", "-tp", "1"], "tensor-parallel-size: 2\n",
     {"tensor_parallel_size": 1}),
    ("flags before --config win too", ["-tp", "1", "--config", "{cfg}"], "tensor-parallel-size: 2\n",
     {"tensor_parallel_size": 1}),
    ("false in a config adds nothing", ["--config", "{cfg}"], "enable-prefix-caching: false\n", {}),
    ("a value after -- is not read", ["--", "-tp", "2"], None, {}),
]


@pytest.mark.parametrize("case,words,config,serve", READ, ids=[c[0] for c in READ])
def test_arguments_read_as_vllm_reads_them(tmp_path, case, words, config, serve):
    cfg = yaml_file(tmp_path, config) if config else ""
    got, errors, _ = runtime.parse_serve([w.replace("{cfg}", cfg) for w in words], {}, FLAGS)
    assert errors == [] and got == serve


# (case, words, config file text or None, words of the refusal)
UNREADABLE = [
    ("a config that is not there", ["--config", "/nonexistent/vllm.yaml"], None, "cannot read it"),
    ("a config that is not YAML", ["--config", "{cfg}"], "a: [1,\n", "not YAML"),
    ("a config that is not a mapping", ["--config", "{cfg}"], "- 1\n", "mapping"),
    ("an empty config", ["--config", "{cfg}"], "", "mapping"),
    ("two configs", ["--config", "{cfg}", "--config", "{cfg}"], "a: 1\n", "more than once"),
    ("--config=FILE", ["--config={cfg}"], "a: 1\n", "write the config file as --config FILE"),
    ("--conf FILE", ["--conf", "{cfg}"], "a: 1\n", "write the config file as --config FILE"),
    ("--config at the end", ["--config"], None, "needs a file"),
    ("an ambiguous abbreviation", ["--max-num", "3584"], None, "ambiguous"),
    ("a dotted word without a value", ["--limit-mm-per-prompt.image"], None, "needs a value"),
]


@pytest.mark.parametrize("case,words,config,words_said", UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_what_the_guard_cannot_read_is_refused(tmp_path, case, words, config, words_said):
    cfg = yaml_file(tmp_path, config) if config is not None else ""
    _, errors, _ = runtime.parse_serve([w.replace("{cfg}", cfg) for w in words], {}, FLAGS)
    assert errors and words_said in errors[0].message, errors


def test_a_config_that_is_not_yaml_by_name_is_refused(tmp_path):
    _, errors, _ = runtime.parse_serve(["--config", yaml_file(tmp_path, "a: 1\n", "vllm.json")], {}, FLAGS)
    assert "only a .yaml or .yml file" in errors[0].message


UPSTREAM = Path.home() / ".cache" / "gaudi-cookbook" / "upstream" / "vllm" / "0.26.0" / "vllm"


def upstream_options() -> list[tuple[str, ...]]:
    """The option strings of each `add_argument` call of vLLM 0.26.0's serve parser, read from its source
    (the frontend's dataclass fields become `--field-name`), or a loud skip when the cache is empty."""
    files = [UPSTREAM / "engine" / "arg_utils.py", UPSTREAM / "entrypoints" / "openai" / "cli_args.py"]
    if not all(f.is_file() for f in files):
        pytest.skip(f"vLLM 0.26.0's source is not in {UPSTREAM} (setup fills it)")
    groups = []
    for f in files:
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
                if names:
                    groups.append(names)
            if isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
                groups += [("--" + s.target.id.replace("_", "-"),) for s in node.body
                           if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    return groups


def test_aliases_are_vllms():
    """Every short name vLLM gives a flag the rules read is in runtime.ALIASES, and nothing else is."""
    groups = upstream_options()
    ours = set(FLAGS) | {"--port"}
    want = {short: long for g in groups for long in g if long in ours for short in g if not short.startswith("--")}
    assert want == {a: f for a, f in runtime.ALIASES.items() if f in ours}
    assert {"-tp", "-q"} <= set(want)


def test_no_other_flag_is_a_prefix_of_ours():
    """The guard resolves abbreviations among the flags it reads: exact only while no other vLLM flag
    is itself a prefix of one of them (argparse takes an exact name before any abbreviation)."""
    ours = set(runtime._option_table(FLAGS))
    others = {o for g in upstream_options() for o in g} - ours
    assert not [(o, f) for o in others for f in ours if f.startswith(o)]


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
                                                     or (v is False and k in settings.NEGATABLE_FLAGS)}


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
    words = shlex.split(out.stdout)
    assert words[-2:] == ["--port", str(hostile.PORT)]
    assert words[words.index("--tensor-parallel-size") + 1] == str(hostile.CARDS)


@pytest.mark.docker
@pytest.mark.parametrize("args,flags,rule", [
    (["--max-num-batched-tokens", "3584"], (), "batched-tokens-at-256k-on-gaudi2"),
    ([], ("-e", "VLLM_DECODE_BS_BUCKET_MAX=16"), "buckets-cover-serve"),
    (["--cookbook-dry-run", "-tp", "2"], (), "tensor-parallel-matches-hardware"),  # a four-card image
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


@pytest.mark.parametrize("args,said", [
    (["-tp", "2"], "refused by rule tensor-parallel-matches-hardware (--tensor-parallel-size)"),
    (["--config", "/nonexistent/vllm.yaml"], "refused: --config /nonexistent/vllm.yaml: cannot read it"),
])
def test_entrypoint_reads_short_names_and_config_files(context, args, said):
    out = entrypoint(context, "--cookbook-dry-run", *args)
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# --- A recipe for four cards (tests/multicard.py): its card count and mode held at run time --------------

@pytest.fixture(scope="module")
def tp4(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp4") / "recipes"
    return recipes.load(multicard.write(root), root)


# (case, user args, run-time env over the image's, the rule expected to refuse or None)
TP4_CASES = [
    ("as the recipe says", [], {}, None),
    ("-tp 4 said again", ["-tp", "4"], {}, None),
    ("-tp 2", ["-tp", "2"], {}, "tensor-parallel-matches-hardware"),
    ("--tensor-parallel-size 8", ["--tensor-parallel-size", "8"], {}, "tensor-parallel-matches-hardware"),
    ("-tp 1", ["-tp", "1"], {}, "tensor-parallel-matches-hardware"),
    ("lazy collectives off", [], {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"}, "lazy-collectives-for-tensor-parallel"),
    ("lazy collectives 0", [], {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "0"}, "lazy-collectives-for-tensor-parallel"),
    ("compile mode needs none", [], {"PT_HPU_LAZY_MODE": "0", "PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"}, None),
]


@pytest.mark.parametrize("case,args,env,rule", TP4_CASES, ids=[c[0] for c in TP4_CASES])
def test_a_four_card_recipe_at_run_time(tp4, case, args, env, rule):
    data = render.runtime_data(tp4)
    errors, found, _ = runtime.check(data, derive.serve_command(tp4.recipe) + args,
                                     {**settings.runtime_env(tp4.recipe), **env})
    assert errors == []
    assert [f.rule for f in found] == ([rule] if rule else []), found


@pytest.fixture(scope="module")
def tp4_context(tp4, tmp_path_factory):
    out = tmp_path_factory.mktemp("tp4ctx") / "ctx"
    render.write_context(render.context_files(tp4, render.vault_base(tp4)), out)
    return out


@pytest.mark.parametrize("args,env,said", [
    (["-tp", "2"], {}, "refused by rule tensor-parallel-matches-hardware (--tensor-parallel-size)"),
    ([], {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"},
     "refused by rule lazy-collectives-for-tensor-parallel (env PT_HPU_ENABLE_LAZY_COLLECTIVES)"),
])
def test_a_four_card_entrypoint_refuses(tp4, tp4_context, args, env, said):
    image_env = settings.runtime_env(tp4.recipe)  # what the image's ENV gives
    out = entrypoint(tp4_context, "--cookbook-dry-run", *args, env={**image_env, **env})
    assert out.returncode == 2 and said in out.stderr, out.stderr
    ok = entrypoint(tp4_context, "--cookbook-dry-run", "-tp", "4", env=image_env)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("rid, cards", [("mixtral-8x7b-instruct-v0.1-gaudi2", 2),
                                        ("llama-3.1-405b-instruct-gaudi3", 8)])
def test_an_imported_multi_card_image_refuses_another_tensor_parallel_size(rid, cards):
    """The guard on an imported recipe's image data: its own -tp runs, any other is refused by the rule."""
    loaded = recipes.load(rid)
    data = render.runtime_data(loaded)
    env = {**loaded.recipe.env}
    base = derive.serve_command(loaded.recipe)
    assert runtime.check(data, base + ["-tp", str(cards)], env)[:2] == ([], [])
    errors, found, _ = runtime.check(data, base + ["-tp", "1"], env)
    assert errors == [] and [f.rule for f in found] == ["tensor-parallel-matches-hardware"]
