"""Long prompts of an exact size in the served model's tokens: filler sentences with the needle at a
given depth and the needle question at the end, counted by the server's own tokenizer. The smoke suite's
needle and prefix-cache checks and the bench's needle scenarios all send these."""

from __future__ import annotations

from ..openai_client import Server
from .prompts import HAYSTACK_SENTENCES, NEEDLE, NEEDLE_QUESTION, NEEDLE_WORD


def messages(sentences: int, depth: float, tag: str = "") -> list[dict]:
    body = [HAYSTACK_SENTENCES[i % len(HAYSTACK_SENTENCES)] for i in range(sentences)]
    body.insert(round(depth * sentences), NEEDLE)
    head = f"Document {tag}.\n\n" if tag else ""
    return [{"role": "user", "content": head + " ".join(body) + "\n\n" + NEEDLE_QUESTION}]


def build(server: Server, tokens: int, depth: float, tag: str = "") -> tuple[list[dict], int]:
    """The longest haystack prompt of at most `tokens` prompt tokens (chat template included), and its
    length: estimated from the tokens per sentence, then corrected with the server's counts."""
    per = max(1.0, server.count_text(" ".join(HAYSTACK_SENTENCES)) / len(HAYSTACK_SENTENCES))
    overhead = server.count_chat(messages(0, depth, tag))
    sentences = max(0, int((tokens - overhead) / per))
    for _ in range(6):
        msgs = messages(sentences, depth, tag)
        count = server.count_chat(msgs)
        missing = tokens - count
        if 0 <= missing < 2 * per:
            return msgs, count
        step = int(missing / per) or (-1 if missing < 0 else 1)
        sentences = max(0, sentences + step)
    while count > tokens and sentences > 0:  # never over the size asked for
        sentences -= 1
        msgs = messages(sentences, depth, tag)
        count = server.count_chat(msgs)
    return msgs, count


def found(answer: str) -> bool:
    """The answer names the needle's word."""
    return NEEDLE_WORD.lower() in answer.lower()
