"""What whitespace-free-forced-tool-calls must leave as vLLM 0.26.0 has it, on the pristine and the
patched tree alike (not a fix module: tests/fixpack/test_fix_lab.py runs it on both trees and wants it green).

- A plain structured output (`response_format` json_schema), with and without the server-wide
  `disable_any_whitespace` and with the per-request field of the same name (which stock ignores),
  accepts exactly what stock accepts, in both backends.
- The server-wide switch keeps its meaning for forced calls too (xgrammar: json.dumps' separators,
  guidance: compact JSON).
- `tool_choice: auto` keeps its whitespace in every structural-tag format.
- The formats tested (cookbook/fixpack/lab/_tool_calls.py) are every one vLLM 0.26.0's server can pick: the
  `structural_tag_model` of each of its tool parsers and of vllm-gaudi's, built by vLLM or by the lab's
  xgrammar.
"""

import importlib
import importlib.util
import json

import pytest
from _tool_calls import ARGS, CHOICES, FORMATS, accepts, adjusted, backend, engine_params, tokenizer
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.sampling_params import StructuredOutputsParams

TEXTS = {
    "compact": json.dumps(ARGS, separators=(",", ":")),
    "json.dumps": json.dumps(ARGS),
    "indented": json.dumps(ARGS, indent=2),
    "padded": '{ "city":   "Paris",  "days": 3 }',
}
# What stock accepts of TEXTS: backend -> server-wide disable_any_whitespace -> accepted texts.
STOCK = {
    "xgrammar": {False: {"compact", "json.dumps", "indented", "padded"}, True: {"json.dumps"}},
    "guidance": {False: {"compact", "json.dumps", "indented", "padded"}, True: {"compact"}},
}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


def accepted(compiled, params, tok) -> set[str]:
    return {name for name, text in TEXTS.items() if accepts(compiled, params, tok, text)}


@pytest.mark.parametrize("per_request", [False, True], ids=["default", "per-request-disable"])
@pytest.mark.parametrize("server_wide", [False, True], ids=["whitespace", "server-disable"])
@pytest.mark.parametrize("backend_name", sorted(STOCK))
def test_plain_json_schema_output_accepts_what_stock_accepts(backend_name, server_wide, per_request, tok):
    response_format = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
    structured = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True) if per_request else None
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                    response_format=None if per_request else response_format,
                                    structured_outputs=structured)
    compiled = backend(backend_name, tok, disable_any_whitespace=server_wide)
    assert accepted(compiled, engine_params(request), tok) == STOCK[backend_name][server_wide]


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("backend_name", sorted(STOCK))
def test_server_wide_switch_keeps_its_meaning_for_forced_calls(backend_name, choice, tok, monkeypatch):
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    params = engine_params(adjusted("qwen3_coder", tok, CHOICES[choice]))
    assert params.structured_outputs.json is not None, "not the JSON-schema path"
    if choice == "required":
        params.structured_outputs.json = json.dumps(SCHEMA)  # the same texts for both choices
    compiled = backend(backend_name, tok, disable_any_whitespace=True)
    assert accepted(compiled, params, tok) == STOCK[backend_name][True]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_auto_tool_calls_keep_their_whitespace(fmt, tok):
    # `auto` has a structural tag only with a strict tool; its calls stay as free as on stock.
    spec = FORMATS[fmt]
    params = engine_params(adjusted(spec.parser, tok, "auto", strict=True))
    assert params.structured_outputs.structural_tag is not None
    xgrammar = backend("xgrammar", tok)
    for where, call in {"canonical": spec.canonical[0], **spec.padded_calls()}.items():
        assert accepts(xgrammar, params, tok, call), f"{fmt}: {where}"


def test_the_tested_formats_are_every_one_the_server_can_pick():
    import vllm_gaudi
    import xgrammar.builtin_structural_tag as xgrammar_builtin
    from vllm.tool_parsers import ToolParserManager
    from vllm.tool_parsers import structural_tag_registry as registry

    vllm_gaudi.register_tool_parsers()  # the HPU plugin's own parsers, as the server registers them
    classes = dict(ToolParserManager.tool_parsers)
    assert "minimax_m3_py" in classes
    unreadable = []
    for name, (module, cls) in ToolParserManager.lazy_parsers.items():
        try:
            classes[name] = getattr(importlib.import_module(module), cls)
        except ImportError:  # an optional dependency is missing: its source must not pick a format
            assert "structural_tag_model" not in open(importlib.util.find_spec(module).origin).read(), name
            unreadable.append(name)
    picked = {}
    for name, cls in sorted(classes.items()):
        if cls.structural_tag_model is not None:
            picked.setdefault(cls.structural_tag_model, []).append(name)

    assert set(picked) == set(FORMATS), picked
    for fmt, spec in FORMATS.items():
        assert spec.parser in picked[fmt]
        # built by vLLM, or by the lab's xgrammar (a builtin vLLM lets through)
        assert fmt in registry._VLLM_STRUCTURAL_TAG_REGISTRY or (
            fmt in registry.XGRAMMAR_BUILTIN_STRUCTURAL_TAG_MODELS
            and fmt in xgrammar_builtin._structural_tag_registry), fmt
    assert set(unreadable) <= {"cohere_command3", "cohere_command4"}, unreadable  # they need cohere_melody
