#!/usr/bin/env python3
"""Derive cookbook/release/schemas/kserve.yaml from a KServe git repository (a bare mirror or a clone):

    .venv/bin/python scripts/derive-kserve-schema.py /path/to/kserve [--ref v0.20.0]

Run it when `invoke k8s --kserve` starts to render a field the committed schema does not list, or to
move to another KServe release (then set KSERVE_REF in cookbook/release/k8s_schema.py to match)."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cookbook.recipe import recipes  # noqa: E402
from cookbook.release import k8s, k8s_schema

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("source")
parser.add_argument("--ref", default=k8s_schema.KSERVE_REF)
args = parser.parse_args()
text = k8s_schema.derive(args.source, args.ref, k8s.schema_samples(recipes.load("qwen3.5-27b-fp8")))
tmp = k8s_schema.SCHEMA.with_suffix(".yaml.tmp")
tmp.write_text(text)
tmp.replace(k8s_schema.SCHEMA)
print(f"{k8s_schema.SCHEMA} ({len(text)} bytes)")
