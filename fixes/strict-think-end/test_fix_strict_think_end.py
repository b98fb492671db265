"""strict-think-end: with the `qwen3` reasoning parser, only `</think>` ends reasoning. A `<tool_call>`
the model writes while still thinking stays reasoning text, in the response parser (whole and
streamed) and in the structured-output gate (`is_reasoning_end`, `is_reasoning_end_streaming`), which
decides when a tool-call grammar starts to constrain the output. Stock treats the `<tool_call>` as an
implicit end of reasoning, so the grammar switches on mid-thought and the thinking leaks into the
answer."""

import pytest
from _qwen3_tokens import ids, qwen3_tokenizer
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.reasoning import ReasoningParserManager

# What the model writes after the chat template's opening <think>: it mentions a tool call while
# thinking, then ends its thought and answers.
THINKING = "I could call <tool_call> get_weather </tool_call> here but no"
OUTPUT = THINKING + " </think> The answer is 42"


@pytest.fixture(scope="module")
def tokenizer():
    return qwen3_tokenizer()


@pytest.fixture
def parser(tokenizer):
    # The class the API server and the structured-output manager both look up by the recipe's name.
    return ReasoningParserManager.get_reasoning_parser("qwen3")(tokenizer)


def request():
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def test_a_tool_call_inside_thinking_stays_reasoning(parser):
    reasoning, content = parser.extract_reasoning(OUTPUT, request())
    assert "<tool_call>" in reasoning and reasoning.rstrip().endswith("but no")
    assert content.strip() == "The answer is 42"


def test_streamed_reasoning_ends_only_at_think_end(parser, tokenizer):
    reasoning, content = "", ""
    previous_text, previous_ids = "", []
    for token_id in ids(tokenizer, OUTPUT):
        delta = tokenizer.decode([token_id]) + " "
        current_text, current_ids = previous_text + delta, previous_ids + [token_id]
        msg = parser.extract_reasoning_streaming(previous_text, current_text, delta, previous_ids, current_ids,
                                                 [token_id])
        if msg is not None:
            reasoning += msg.reasoning or ""
            content += msg.content or ""
        previous_text, previous_ids = current_text, current_ids
    assert "<tool_call>" in reasoning and "get_weather" in reasoning
    assert "42" in content and "<tool_call>" not in content


def test_the_structured_output_gate_waits_for_think_end(parser, tokenizer):
    thinking = ids(tokenizer, THINKING)
    assert not parser.is_reasoning_end(thinking)
    # Decode step by decode step, as the structured-output manager asks: never before </think>.
    for i in range(1, len(thinking) + 1):
        assert not parser.is_reasoning_end_streaming(thinking[:i], thinking[i - 1:i]), thinking[:i]
    done = ids(tokenizer, OUTPUT)
    assert parser.is_reasoning_end(done)
