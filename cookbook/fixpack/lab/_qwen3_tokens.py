"""A small Qwen3-style tokenizer made in-process (no downloads): a word-level vocabulary with
Qwen3's reasoning and tool-call markers as single special tokens, wrapped as a transformers fast
tokenizer so vLLM's parsers read it as they read the real one."""

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
WORDS = ["<unk>", "I", "could", "call", "get_weather", "here", "but", "no", "The", "answer", "is", "42", "\n",
         "<function=get_weather>", "<parameter=city>", "Paris", "</parameter>", "</function>"]


def qwen3_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(WORDS + SPECIAL)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL})
    return fast


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)
