"""Structured output: `response_format` with a JSON schema gives an object valid against it."""

from __future__ import annotations

import json

import jsonschema

from ..openai_client import ServerError
from .core import Context, Outcome, content, said
from .prompts import JSON_QUESTION, JSON_SCHEMA


def response_format(ctx: Context, params: dict) -> Outcome:
    kind = params.get("type", "json_schema")
    if kind != "json_schema":
        raise ValueError(f"the suite checks response_format type json_schema, not {kind!r}")
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": JSON_SCHEMA, "strict": True}}
    try:
        response = ctx.server.chat([{"role": "user", "content": JSON_QUESTION}], temperature=0,
                                   max_tokens=ctx.budget, response_format=fmt)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    try:
        value = json.loads(content(response))
        jsonschema.validate(value, JSON_SCHEMA)
    except json.JSONDecodeError:
        return Outcome("failed", f"not JSON: {said(response)!r}")
    except jsonschema.ValidationError as exc:
        return Outcome("failed", f"does not match the schema: {exc.message}")
    return Outcome("passed", "valid object")
