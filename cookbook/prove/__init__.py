"""An image proven to serve: the host check (doctor), the container it runs, the OpenAI client, the smoke checks,
the benchmarks, the result files and the recipe pages that show them.

May import: host, recipe, image. tests/test_layout.py holds the direction."""
