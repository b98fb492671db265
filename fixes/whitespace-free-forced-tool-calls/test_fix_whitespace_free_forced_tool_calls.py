"""whitespace-free-forced-tool-calls: a named or `required` tool_choice constrains the call's arguments
with bounded whitespace, so a model cannot run away in whitespace inside a forced call.

Driven as the server does it: a tool parser adjusts a real ChatCompletionRequest, its sampling
parameters cross the engine-core serialisation, and the structured-output manager's own
`_create_grammar` compiles them with a real backend (xgrammar, and llguidance on the JSON-schema
path) over a byte-level tokenizer built in-process; the grammar is fed token by token what a model
would write (cookbook/fixpack/lab/_tool_calls.py).

- The structural-tag path (VLLM_ENFORCE_STRICT_TOOL_CALLING on, vLLM 0.26.0's default): every format
  the server can pick, the recipe's `qwen_3_coder` among them. Stock admits any run of whitespace in
  the arguments (around XML parameters, around non-string values, between JSON members); the fix
  bounds each run to one character, so the call the model's template writes still matches.
- The JSON-schema path (the variable at 0): stock compiles the arguments' schema with any whitespace;
  the fix bounds it too, in both backends.

What the fix must leave alone (plain structured output, `auto` tool calls) is pinned in
cookbook/fixpack/lab/test_structured_output_whitespace.py, which passes on both trees.
"""

import json

import pytest
from _tool_calls import ARGS, CHOICES, FORMATS, accepts, adjusted, backend, engine_params, parser, tokenizer


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


@pytest.fixture(scope="module")
def xgrammar(tok):
    return backend("xgrammar", tok)


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_forced_call_has_no_free_whitespace_in_every_structural_tag_format(fmt, choice, tok, xgrammar):
    spec = FORMATS[fmt]
    request = adjusted(spec.parser, tok, CHOICES[choice])
    params = engine_params(request)
    assert params.structured_outputs.structural_tag is not None, "not the structural-tag path"
    assert json.loads(params.structured_outputs.structural_tag)["format"], fmt

    # The calls the model's template writes still match, and the format's parser reads them.
    for call in spec.canonical:
        assert accepts(xgrammar, params, tok, call), call
        calls = parser(spec.parser, tok, request).extract_tool_calls(call, request).tool_calls
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", ARGS)]
    taken = [where for where, call in spec.padded_calls().items() if accepts(xgrammar, params, tok, call)]
    assert taken == [], f"{fmt}: whitespace padding accepted {taken}"


def indented(value) -> str:
    return json.dumps(value, indent=2).replace(": ", " :  ")


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("backend_name", ["guidance", "xgrammar"])
def test_json_schema_forced_call_has_no_free_whitespace(backend_name, choice, tok, monkeypatch):
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    params = engine_params(adjusted("qwen3_coder", tok, CHOICES[choice]))
    assert params.structured_outputs.json is not None, "not the JSON-schema path"
    # What the grammar sees: the named tool's arguments, or the `required` list of calls.
    value = ARGS if choice == "named" else [{"name": "get_weather", "parameters": ARGS}]
    compiled = backend(backend_name, tok)

    assert accepts(compiled, params, tok, json.dumps(value))  # as json.dumps, and a model, writes it
    assert not accepts(compiled, params, tok, indented(value))
    assert not accepts(compiled, params, tok, json.dumps(value).replace(", ", ",   "))
