"""Tool calls as the server constrains them, for the whitespace tests of the lab.

The structural-tag formats vLLM 0.26.0's server can pick (a tool parser's `structural_tag_model`,
used when a request has tools and VLLM_ENFORCE_STRICT_TOOL_CALLING is on, vLLM's default), one
parser per format, each with the call `get_weather(city="Paris", days=3)` as the model's own chat
template writes it, and the same call padded with whitespace where the format's grammar leaves it
free. cookbook/fixpack/lab/test_structured_output_whitespace.py checks that this table is every format the
server can pick.

The compile path is the engine's: the request's sampling parameters go through the engine-core
serialisation (msgspec, as between the API server and the engine core) and the structured-output
manager's own `_create_grammar` compiles them with a real backend over a byte-level tokenizer.
"""

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

from _byte_tokens import byte_tokenizer
from vllm.config import StructuredOutputsConfig, VllmConfig
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser import ParserManager
from vllm.sampling_params import SamplingParams
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.backend_guidance import GuidanceBackend
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend
from vllm.v1.structured_output.request import StructuredOutputRequest

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"]}
ARGS = {"city": "Paris", "days": 3}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
CHOICES = {"named": NAMED, "required": "required"}
BACKENDS = {"xgrammar": XgrammarBackend, "guidance": GuidanceBackend}

# The formats' control markers, special tokens of their models (some parsers look their ids up).
MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
           "<｜tool▁sep｜>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
           "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<arg_key>", "</arg_key>", "<arg_value>",
           "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>", "<|python_tag|>")


@dataclass
class Format:
    parser: str  # a tool parser that picks the format
    canonical: list[str]  # the call as the model's template writes it
    padded: dict[str, tuple[str, str]] = field(default_factory=dict)  # where: (in the canonical, padded)

    def padded_calls(self) -> dict[str, str]:
        text = self.canonical[0]
        out = {}
        for where, (old, new) in self.padded.items():
            assert text.count(old) == 1, f"{self.parser}: {old!r} is not once in its call"
            out[where] = text.replace(old, new)
        return out


J = json.dumps(ARGS)  # {"city": "Paris", "days": 3}
# JSON arguments: whitespace after a separator and around a value.
JSON_PADS = {"after a comma": ('"Paris", ', '"Paris",\n    '), "around a number": (": 3}", ":  \n  3 \n }")}
_DS = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
_DSML = ('\n\n<｜DSML｜{0}>\n<｜DSML｜invoke name="get_weather">\n'
         '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
         '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{0}>')
_DSML_PADS = {"between parameters": ('</｜DSML｜parameter>\n<｜DSML｜parameter name="days"',
                                     '</｜DSML｜parameter>\n\n \n<｜DSML｜parameter name="days"'),
              "around a number": (">3<", ">  3\n\n<")}
# Qwen3.6's tool-call format, as its chat template writes it (the recipe's).
QWEN = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")

FORMATS = {
    "deepseek_r1": Format("deepseek_v3", [_DS.format("function<｜tool▁sep｜>get_weather\n```json\n" + J + "\n```")],
                          JSON_PADS),
    "deepseek_v3_1": Format("deepseek_v31", [_DS.format("get_weather<｜tool▁sep｜>" + J)], JSON_PADS),
    "deepseek_v3_2": Format("deepseek_v32", [_DSML.format("function_calls")], _DSML_PADS),
    "deepseek_v4": Format("deepseek_v4", [_DSML.format("tool_calls")], _DSML_PADS),
    "glm_4_7": Format(
        "glm47",
        ["<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
         "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
         # GLM-4.5's template, the same format with a newline between the parts (parser glm45)
         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
         "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"],
        {"between parameters": ("</arg_value><arg_key>days", "</arg_value>\n\n  <arg_key>days"),
         "around a number": ("<arg_value>3</arg_value>", "<arg_value>   3 \n</arg_value>")}),
    "hermes": Format("hermes", ['<tool_call>\n{"name": "get_weather", "arguments": ' + J + "}\n</tool_call>",
                                '<tool_call>{"name": "get_weather", "arguments": ' + J + "}</tool_call>"], JSON_PADS),
    "kimi": Format("kimi_k2", ["<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                               "<|tool_call_argument_begin|>" + J + "<|tool_call_end|><|tool_calls_section_end|>"],
                   JSON_PADS),
    "llama": Format("llama3_json", ['{"name": "get_weather", "parameters": ' + J + "}"], JSON_PADS),
    "minimax": Format(
        "minimax_m2",
        ['\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
         '<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>'],
        {"between parameters": ('</parameter>\n<parameter name="days">', '</parameter>\n\n\n<parameter name="days">'),
         "around a number": ('"days">3<', '"days">\n  3  <')}),
    "qwen_3_coder": Format("qwen3_coder", [QWEN], {
        "before the first parameter": (">\n<parameter=city>", ">\n\n\n<parameter=city>"),
        "between parameters": ("</parameter>\n<parameter=days>", "</parameter>\n\n\n\n<parameter=days>"),
        "around a number": ("\n3\n", "\n   3  \n\n"),
        "after the last parameter": ("</parameter>\n</function>", "</parameter>\n\n \n</function>"),
    }),
}


def tokenizer():
    return byte_tokenizer(extra_special=MARKERS)


def backend(name: str, tok, disable_any_whitespace: bool = False):
    """A structured-output backend with the server-wide settings (vLLM's defaults, or the whitespace switch)."""
    config = VllmConfig(structured_outputs_config=StructuredOutputsConfig(
        backend=name, disable_any_whitespace=disable_any_whitespace))
    return BACKENDS[name](config, tokenizer=tok, vocab_size=len(tok))


def tools(strict: bool | None = None) -> list[dict]:
    function = {"name": "get_weather", "parameters": PARAMETERS}
    if strict is not None:
        function["strict"] = strict
    return [{"type": "function", "function": function}]


def parser(name: str, tok, request: ChatCompletionRequest):
    return ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True)(tok, request.tools)


def adjusted(name: str, tok, tool_choice, strict: bool | None = None) -> ChatCompletionRequest:
    """The request as the online renderer hands it on: the format's parser adjusted it."""
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                    tools=tools(strict), tool_choice=tool_choice)
    return parser(name, tok, request).adjust_request(request)


def engine_params(request: ChatCompletionRequest) -> SamplingParams:
    """The request's sampling parameters as the engine core receives them from the API server."""
    params = request.to_sampling_params(64, {})
    return MsgpackDecoder(SamplingParams).decode(MsgpackEncoder().encode(params))


def compile_grammar(backend, params: SamplingParams):
    """The engine's way: the manager compiles the request's structured output."""
    manager = SimpleNamespace(backend=backend)
    request = SimpleNamespace(request_id="r",
                              structured_output_request=StructuredOutputRequest.from_sampling_params(params))
    return StructuredOutputManager._create_grammar(manager, request)


def accepts(backend, params: SamplingParams, tok, text: str) -> bool:
    """Whether a fresh grammar for the request takes the whole text, token by token, and then the end."""
    grammar = compile_grammar(backend, params)
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    return grammar.accept_tokens("r", ids) and grammar.is_terminated()
