"""A byte-level tokenizer made in-process (no downloads): one token per byte, as GPT-2/Qwen spell
them, plus Qwen's chat, reasoning and tool-call markers as special tokens. Any text encodes, so a
grammar can be fed exactly what a model would write; xgrammar and llguidance read it as a byte-level
Hugging Face tokenizer, the kind the recipe's model has."""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]


def byte_tokenizer(extra_special: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """extra_special: more special tokens, e.g. another model's tool-call markers."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL})
    if extra_special:
        fast.add_tokens(list(extra_special), special_tokens=True)
    return fast
