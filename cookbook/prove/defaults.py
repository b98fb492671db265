"""What smoke and bench run on a recipe that publishes no Verified or Performance table of its own (one
imported from vllm-gaudi's defaults): the suite's model-agnostic checks and scenarios, sized by what the
recipe states (its context, its max_num_seqs, its modalities, its flags), so its page's tables fill from a
run on its hardware. Pure functions; a recipe's own table, where it has one, is always what runs."""

from __future__ import annotations

from ..recipe.recipes import LoadedRecipe
from ..recipe.schema import Check, Performance, Recipe, Scenario, Verified

SETUP = ("The cookbook's default checks: this recipe publishes none (its settings are upstream's defaults), "
         "so these are sized by what it states.")
METHOD = ("The cookbook's default scenarios, with no published figures to compare to: the run's own figures "
          "are the first.")
STREAMS = 32  # the page's concurrency, capped by the recipe's max_num_seqs


def context(r: Recipe) -> int:
    """The context a recipe serves (and its smoke sizes were measured at): --max-model-len, else native."""
    return r.serve.max_model_len or r.model.native_context


def streams(r: Recipe) -> int:
    return min(STREAMS, r.serve.max_num_seqs or STREAMS)


def checks(r: Recipe) -> list[Check]:
    n, ctx = streams(r), context(r)
    out = [
        Check(name="known-answers", check="known-answers", title="Known-answer prompts, temperature 0",
              params={"prompts": 8, "temperature": 0}, expect="8/8"),
        Check(name="known-answers-concurrent", check="known-answers", title=f"The same prompts, {n} in flight",
              params={"prompts": n, "concurrency": n, "temperature": 0}, expect=f"{n}/{n}"),
        Check(name="top-logprobs", check="top-logprobs", title="`top_logprobs: 20`", params={"top_logprobs": 20},
              expect="20 entries on every token"),
        Check(name="prompt-logprobs", check="prompt-logprobs", title="`prompt_logprobs: 5`",
              params={"prompt_logprobs": 5}, expect="returned; server healthy afterwards"),
        Check(name="json-schema", check="response-format", title="`response_format` JSON schema",
              params={"type": "json_schema"}, expect="valid object"),
        Check(name="logit-bias", check="logit-bias", title="`logit_bias` +100 on one token", params={"bias": 100},
              expect="takes effect"),
    ]
    if r.serve.enable_auto_tool_choice and r.serve.tool_call_parser:
        out.append(Check(name="tool-call-streamed", check="tool-call-streamed", title="Streamed tool call",
                         params={"tool": "get_weather"}, expect="name and JSON arguments assembled correctly"))
    if "image" in r.model.modalities:
        out.append(Check(name="images-1", check="image-colours", title="One image of a solid colour",
                         params={"images": 1}, expect="the colour named"))
    depths = [ctx // 2, ctx * 9 // 10]
    out += [Check(name="needle-cold", check="needle", title="Needle in a haystack at half and nine tenths of the "
                  "context, cold", params={"context_tokens": depths}, expect=f"{len(depths)}/{len(depths)}"),
            Check(name="health-after", check="health", title="Server health after all checks",
                  expect="healthy, no restarts")]
    return out


def scenarios(r: Recipe) -> list[Scenario]:
    n = streams(r)
    return [
        Scenario(name="one-stream-short", title="One stream, short prompt, 256 tokens", streams=1, prompt="short",
                 max_tokens=256, expect={}),
        Scenario(name=f"streams-{n}-short", title=f"{n} streams, short prompts, 256 tokens each",
                 streams=n, prompt="short", max_tokens=256, expect={}),
        Scenario(name="cold-half-context", title="Cold prompt of half the context (needle)", streams=1,
                 prompt="needle", prompt_tokens=context(r) // 2, expect={}),
    ]


def verified(loaded: LoadedRecipe) -> Verified:
    """The recipe's Verified table, or the defaults where it publishes none."""
    own = loaded.recipe.verified
    return own if own and own.checks else Verified(setup=SETUP, checks=checks(loaded.recipe))


def performance(loaded: LoadedRecipe) -> Performance:
    """The recipe's Performance table, or the defaults where it publishes none."""
    own = loaded.recipe.performance
    return own if own and own.scenarios else Performance(method=METHOD, scenarios=scenarios(loaded.recipe))
