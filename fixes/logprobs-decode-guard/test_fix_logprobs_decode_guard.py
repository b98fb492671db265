"""logprobs-decode-guard: a bad logprob token id no longer stops the output path.

A logprob id below 0 or at/above the tokenizer's vocabulary (a corrupted id, a slot of the
prompt-logprobs tensor never written, a padded-vocabulary row) reaches the tokenizer in vLLM's
logprobs processor: the Rust tokenizer raises OverflowError for ids outside u32, and a
SentencePiece-style (Metaspace) tokenizer returns no piece for ids past its vocabulary, which then
raises TypeError. In the API server that exception fails the output handler and every request.
(A byte-level tokenizer, Qwen's kind, decodes ids between its vocabulary and 2^32 to an empty
string on the stock release; those ids are tested with the Metaspace tokenizer, where they raise.)

Each test runs one request through vLLM's real OutputProcessor (its detokenizer and logprobs
processor) with a tokenizer trained in-process, the bad id in the prompt logprobs, in a top-k
entry and as a sampled token followed by a byte-fallback token whose correction decodes the
sampled context; the request must complete with its text, the bad id's entry an empty token, and
one warning logged.
"""

import logging
import time

import numpy as np
import pytest
import torch

CORPUS = ["the quick brown fox jumps over the lazy dog", "café crème brûlée"] * 50
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def byte_level():
    """A GPT-2/Qwen-style byte-level BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok, "Ã"  # the first byte of "é" alone: decodes to U+FFFD


def metaspace():
    """A Llama/SentencePiece-style BPE: Metaspace pre-tokenizer, byte fallback."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<eos>", *BYTES]))
    return tok, "<0xC3>"


@pytest.fixture(scope="module", params=[byte_level, metaspace], ids=["byte-level", "metaspace"])
def tokenizer(request):
    from transformers import PreTrainedTokenizerFast
    from vllm.tokenizers.hf import get_cached_tokenizer

    tok, partial_byte = request.param()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    cached = get_cached_tokenizer(hf)
    cached.partial_byte_id = hf.convert_tokens_to_ids(partial_byte)
    assert cached.decode([cached.partial_byte_id]).endswith("\ufffd")
    return cached


@pytest.fixture
def warnings_seen(caplog):
    """Warnings from vLLM's loggers (they do not propagate to the root), with warning_once's
    memory cleared so each test sees its own first warning."""
    from vllm import logger as vllm_logger

    vllm_logger._print_warning_once.cache_clear()
    vllm = logging.getLogger("vllm")
    vllm.addHandler(caplog.handler)
    yield lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    vllm.removeHandler(caplog.handler)


def lists(ids: list[int]):
    from vllm.v1.outputs import LogprobsLists

    row = np.array([ids], dtype=np.int64)  # int64 so ids past 2^31 can be expressed
    return LogprobsLists(row, np.full(row.shape, -1.0, dtype=np.float32), np.array([1]), None)


def run_request(tokenizer, bad: int):
    """One request through the OutputProcessor, the bad id in every place a logprob id reaches the
    tokenizer. Returns the final RequestOutput."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.outputs import LogprobsTensors

    prompt = tokenizer.encode("the lazy dog", add_special_tokens=False)
    words = tokenizer.encode("the quick brown fox", add_special_tokens=False)
    params = SamplingParams(max_tokens=len(words) + 2, logprobs=2, prompt_logprobs=1,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    processor = OutputProcessor(tokenizer, log_stats=False)
    processor.add_request(EngineCoreRequest("r", prompt, None, params, None, time.time(), None, None, None,
                                            external_req_id="r"), None)

    # Prompt logprobs: [target, top-1] per position, the last position's top-1 bad.
    ids = torch.tensor([[prompt[i + 1], prompt[0]] for i in range(len(prompt) - 1)], dtype=torch.int64)
    ids[-1, 1] = bad
    prompt_lp = LogprobsTensors(ids, torch.full(ids.shape, -1.0), torch.ones(len(ids), dtype=torch.int64))

    other = words[0]
    steps = [(w, [w, other, w]) for w in words]        # [sampled, top-1, top-2]
    steps[1] = (words[1], [words[1], other, bad])       # a bad top-k id
    steps.append((bad, [bad, other, words[0]]))         # a bad sampled id
    partial = tokenizer.partial_byte_id                 # its correction decodes the context
    steps.append((partial, [partial, other, words[0]]))
    outputs = []
    for i, (sampled, top) in enumerate(steps):
        last = i == len(steps) - 1
        out = EngineCoreOutput("r", [sampled], new_logprobs=lists(top),
                               new_prompt_logprobs_tensors=prompt_lp if i == 0 else None,
                               finish_reason=FinishReason.LENGTH if last else None)
        outputs += processor.process_outputs([out]).request_outputs
    assert len(outputs) == 1 and outputs[0].finished
    return outputs[0], words


def check(tokenizer, bad, warnings_seen):
    result, words = run_request(tokenizer, bad)
    completion = result.outputs[0]
    assert completion.text.strip().startswith("the quick brown fox")
    # The bad id keeps its place and logprob; its token is empty. Good ids decode as before.
    assert result.prompt_logprobs[-1][bad].decoded_token == ""
    assert completion.logprobs[1][bad].decoded_token == ""
    assert completion.logprobs[len(words)][bad].decoded_token == ""
    from vllm.tokenizers.detokenizer_utils import convert_ids_list_to_tokens

    assert completion.logprobs[1][words[1]].decoded_token == convert_ids_list_to_tokens(tokenizer, [words[1]])[0]
    guard = [m for m in warnings_seen() if "outside the tokenizer's vocabulary" in m]
    assert len(guard) == 1, warnings_seen()


@pytest.mark.parametrize("bad", [-1, -(2**31), 2**32, 2**32 + 7, 2**63 - 1])
def test_ids_outside_u32_are_replaced_and_the_request_completes(tokenizer, bad, warnings_seen):
    check(tokenizer, bad, warnings_seen)


@pytest.mark.parametrize("offset", [0, 1, 2**31])
def test_ids_past_a_metaspace_vocabulary_are_replaced_and_the_request_completes(offset, warnings_seen):
    from transformers import PreTrainedTokenizerFast
    from vllm.tokenizers.hf import get_cached_tokenizer

    tok, partial_byte = metaspace()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    cached = get_cached_tokenizer(hf)
    cached.partial_byte_id = hf.convert_tokens_to_ids(partial_byte)
    check(cached, len(cached) + offset, warnings_seen)
