"""Gaudi cookbook: recipes as data, rendered into checked vLLM-on-Gaudi container images."""
