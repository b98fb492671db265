"""The smoke suite's fixed conversations: the known-answer questions, the weather tool and its
result, the JSON schema, the needle. Standard library only and free of imports from the cookbook:
tests/tinymodel/train.py loads this file on its own to train the tiny test model on exactly these
prompts (it hashes this file into the model's cache key)."""

from __future__ import annotations

# (question, a string the answer must contain, case-insensitive). Arithmetic, facts, translation.
KNOWN_ANSWERS: list[tuple[str, str]] = [
    ("What is 7 + 5? Answer with the number only.", "12"),
    ("What is 9 times 8? Answer with the number only.", "72"),
    ("What is 100 minus 37? Answer with the number only.", "63"),
    ("What is the capital of France? Answer with one word.", "Paris"),
    ("What is the capital of Japan? Answer with one word.", "Tokyo"),
    ("What is the chemical symbol for gold? Answer with the symbol only.", "Au"),
    ("Translate 'thank you' into French. Answer with the translation only.", "merci"),
    ("Translate 'cat' into Spanish. Answer with the translation only.", "gato"),
]

CITY = "Paris"
WEATHER_QUESTION = f"What is the weather in {CITY} right now? Use the tool."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city's name"}},
            "required": ["city"],
        },
    },
}
# What the tool "returned": the answer to the tool result must use these values.
WEATHER_RESULT = {"city": CITY, "temperature_c": 23, "condition": "sunny"}
WEATHER_RESULT_WORDS = ("23", "sunny")

JSON_QUESTION = f"Give the current weather in {CITY} as a JSON object with the keys city and temperature_c."
JSON_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature_c": {"type": "integer"}},
    "required": ["city", "temperature_c"],
    "additionalProperties": False,
}

# The needle hidden in a haystack, and the question that asks for it.
NEEDLE_WORD = "marmalade"
NEEDLE = f"The secret word is {NEEDLE_WORD}."
NEEDLE_QUESTION = "What is the secret word hidden in the text above? Answer with the word only."
HAYSTACK_SENTENCES = [
    "The river runs past the old mill and under the stone bridge.",
    "Farmers bring apples, pears and plums to the market on Saturdays.",
    "A quiet wind moves through the tall grass near the hills.",
    "The library opens at nine and closes when the last reader leaves.",
    "Clouds gather over the harbour before the evening rain.",
    "Children walk to school along the path beside the canal.",
    "The baker lights the oven long before the sun comes up.",
    "An old clock in the square strikes every hour of the day.",
]

# A plain prompt (logprobs and logit_bias checks); the word the logit_bias check pushes.
PLAIN_QUESTION = "Say hello."
BIAS_WORD = "zebra"
