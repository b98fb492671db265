"""whitespace-free-forced-tool-calls: a named or `required` tool_choice constrains the arguments
without free whitespace, so a model cannot run away in whitespace inside a forced call.

Driven as the server does it: the recipe's parser pair (`qwen3_coder` tools, `qwen3` reasoning)
adjusts a real ChatCompletionRequest, the structured-output manager's own `_create_grammar` compiles
the request's key with a real backend (xgrammar, and llguidance for the JSON-schema path) over a
byte-level tokenizer built in-process, and the compiled grammar is fed token by token what a model
would write.

- The recipe's path (VLLM_ENFORCE_STRICT_TOOL_CALLING on, its vLLM 0.26.0 default): the forced call is
  a `qwen_xml` structural tag. Stock admits any run of whitespace around each `<parameter=...>` and
  around non-string values; the fix bounds every such run to one character, the newline Qwen's own
  format puts there (xgrammar refuses a bound of 0).
- The JSON-schema path (the variable at 0): stock compiles the arguments' schema with any whitespace,
  because both backends read only the server-wide `disable_any_whitespace`; the fix marks the forced
  request whitespace-free, both backends honour that per-request flag (compact `,` and `:`), and the
  flag is part of the grammar's key, so a default request with the same schema keeps its whitespace.
"""

import json
from types import SimpleNamespace

import pytest
from _byte_tokens import byte_tokenizer
from vllm.config import VllmConfig
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser import ParserManager
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.backend_guidance import GuidanceBackend
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend
from vllm.v1.structured_output.request import StructuredOutputRequest

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
CHOICES = {"named": NAMED, "required": "required"}

# Qwen3.6's tool-call format, as its chat template writes it, and the same call with whitespace padding
# in each place the qwen_xml grammar leaves free.
CANONICAL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
XML_PADDED = {
    "before the first parameter": CANONICAL.replace(">\n<parameter=city>", ">\n\n\n<parameter=city>"),
    "between parameters": CANONICAL.replace("</parameter>\n<parameter=days>", "</parameter>\n\n\n\n<parameter=days>"),
    "around a number": CANONICAL.replace("\n3\n", "\n   3  \n\n"),
    "after the last parameter": CANONICAL.replace("</parameter>\n</function>", "</parameter>\n\n \n</function>"),
}
# What the grammar sees on the JSON-schema path: the named tool's arguments, or the `required` list.
ARGS = {"city": "Paris", "days": 3}
JSON_TEXT = {"named": ARGS, "required": [{"name": "get_weather", "parameters": ARGS}]}
BACKENDS = {"xgrammar": XgrammarBackend, "guidance": GuidanceBackend}


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def backend(request, tokenizer):
    # The recipe's server-wide structured-output settings: vLLM's defaults (whitespace allowed).
    return BACKENDS[request.param](VllmConfig(), tokenizer=tokenizer, vocab_size=len(tokenizer))


@pytest.fixture(scope="module")
def xgrammar(tokenizer):
    return XgrammarBackend(VllmConfig(), tokenizer=tokenizer, vocab_size=len(tokenizer))


def adjust(tokenizer, tool_choice) -> ChatCompletionRequest:
    """The request as the online renderer hands it on: the recipe's parsers adjusted it."""
    parser = ParserManager.get_parser(tool_parser_name="qwen3_coder", reasoning_parser_name="qwen3",
                                      enable_auto_tools=True)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                    tools=TOOLS, tool_choice=tool_choice)
    return parser(tokenizer, request.tools).adjust_request(request)


def compile_grammar(backend, params: StructuredOutputsParams):
    """The engine's way: the manager compiles the request's structured-output key."""
    manager = SimpleNamespace(backend=backend)
    request = SimpleNamespace(request_id="r", structured_output_request=StructuredOutputRequest(params=params))
    return StructuredOutputManager._create_grammar(manager, request)


def accepts(grammar, tokenizer, text: str) -> bool:
    """Whether the grammar takes the whole text, token by token, and then the end of sequence."""
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return grammar.accept_tokens("r", ids) and grammar.is_terminated()


def padded(value) -> str:
    return json.dumps(value, indent=2).replace(": ", " :  ")


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_recipe_forced_call_has_no_free_whitespace_around_parameters(choice, tokenizer, xgrammar):
    request = adjust(tokenizer, CHOICES[choice])
    params = request.structured_outputs
    assert params is not None and params.structural_tag is not None, "not the recipe's structural-tag path"

    assert accepts(compile_grammar(xgrammar, params), tokenizer, CANONICAL)
    taken = [where for where, text in XML_PADDED.items()
             if accepts(compile_grammar(xgrammar, params), tokenizer, text)]
    assert taken == [], f"whitespace padding accepted {taken}"

    # The recipe's tool parser still reads the call the grammar lets through.
    parser = ParserManager.get_parser(tool_parser_name="qwen3_coder", reasoning_parser_name="qwen3",
                                      enable_auto_tools=True)(tokenizer, request.tools)
    calls = parser.extract_tool_calls(CANONICAL, request).tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", ARGS)]


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_json_schema_forced_call_is_compact_in_both_backends(choice, tokenizer, backend, monkeypatch):
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    params = adjust(tokenizer, CHOICES[choice]).structured_outputs
    assert params is not None and params.json is not None, "not the JSON-schema path"

    compact = json.dumps(JSON_TEXT[choice], separators=(",", ":"))
    assert accepts(compile_grammar(backend, params), tokenizer, compact)
    assert not accepts(compile_grammar(backend, params), tokenizer, padded(JSON_TEXT[choice]))


def test_per_request_setting_is_honoured_and_keys_the_grammar(tokenizer, backend):
    # Two requests for the same schema, one whitespace-free, one default: neither gets the other's grammar.
    strict = StructuredOutputsParams(json=PARAMETERS, disable_any_whitespace=True)
    default = StructuredOutputsParams(json=PARAMETERS)
    assert (StructuredOutputRequest(params=strict).structured_output_key
            != StructuredOutputRequest(params=default).structured_output_key)

    compact, loose = json.dumps(ARGS, separators=(",", ":")), padded(ARGS)
    assert accepts(compile_grammar(backend, strict), tokenizer, compact)
    assert not accepts(compile_grammar(backend, strict), tokenizer, loose)
    assert accepts(compile_grammar(backend, default), tokenizer, loose)
