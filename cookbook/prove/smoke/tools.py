"""Tool calling through the server's tool parser: a call chosen with `tool_choice: auto` (sampled),
a streamed call assembled from its deltas, and a tool result fed back and used in the answer."""

from __future__ import annotations

import json

from ..openai_client import ServerError
from .core import Context, Outcome, content, said
from .prompts import CITY, WEATHER_QUESTION, WEATHER_RESULT, WEATHER_RESULT_WORDS, WEATHER_TOOL

ASK = [{"role": "user", "content": WEATHER_QUESTION}]


def _tool(params: dict) -> dict:
    name = params.get("tool", "get_weather")
    if name != WEATHER_TOOL["function"]["name"]:
        raise ValueError(f"the suite knows the tool get_weather, not {name!r}")
    return WEATHER_TOOL


def judge_call(name: str | None, arguments: str | None) -> str | None:
    """Why a tool call is not a valid get_weather call for the city asked about, or None."""
    if name != WEATHER_TOOL["function"]["name"]:
        return f"called {name!r}, not get_weather"
    try:
        args = json.loads(arguments or "")
    except json.JSONDecodeError:
        return f"arguments are not JSON: {arguments!r}"
    if not isinstance(args, dict) or str(args.get("city", "")).strip().lower() != CITY.lower():
        return f"arguments {arguments!r} do not name the city {CITY}"
    return None


def tool_call(ctx: Context, params: dict) -> Outcome:
    tool = _tool(params)
    runs = int(params.get("runs", 1))
    wrong = []
    for run in range(runs):
        try:
            response = ctx.server.chat(ASK, tools=[tool], tool_choice=params.get("tool_choice", "auto"),
                                       temperature=float(params.get("temperature", 0)), max_tokens=ctx.budget)
        except ServerError as exc:
            wrong.append(f"run {run + 1}: {exc}")
            continue
        calls = response["choices"][0]["message"].get("tool_calls") or []
        if not calls:
            wrong.append(f"run {run + 1}: no tool call; content {said(response)!r}")
            continue
        why = judge_call(calls[0]["function"].get("name"), calls[0]["function"].get("arguments"))
        if why:
            wrong.append(f"run {run + 1}: {why}")
    return Outcome.count(runs - len(wrong), runs, wrong, " valid get_weather calls")


def assemble(chunks: list[dict]) -> tuple[str | None, str, str]:
    """The first streamed tool call's name and arguments, joined from the deltas; and the content."""
    name, arguments, text = None, "", ""
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                if call.get("index", 0) != 0:
                    continue
                fn = call.get("function") or {}
                name = fn.get("name") or name
                arguments += fn.get("arguments") or ""
    return name, arguments, text


def tool_call_streamed(ctx: Context, params: dict) -> Outcome:
    tool = _tool(params)
    try:
        chunks = ctx.server.chat_stream(ASK, tools=[tool], tool_choice="auto", temperature=0,
                                        max_tokens=ctx.budget)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    name, arguments, text = assemble(chunks)
    if name is None:
        return Outcome("failed", f"no tool call in {len(chunks)} chunks; content {text[:160]!r}")
    why = judge_call(name, arguments)
    return Outcome("failed", why) if why else Outcome("passed", "name and JSON arguments assembled correctly")


def tool_result(ctx: Context, params: dict) -> Outcome:
    tool = _tool(params)
    call = {"id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": CITY})}}
    messages = ASK + [{"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(WEATHER_RESULT)}]
    try:
        response = ctx.server.chat(messages, tools=[tool], temperature=0, max_tokens=ctx.budget)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    answer = content(response)
    missing = [w for w in WEATHER_RESULT_WORDS if w.lower() not in answer.lower()]
    if missing:
        return Outcome("failed", f"the answer does not use {', '.join(missing)}: {said(response)!r}")
    return Outcome("passed", "the answer uses the returned values")
