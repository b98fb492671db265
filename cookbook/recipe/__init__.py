"""What a recipe may say and what follows from it: the YAML with its source lines, the schema, the fix pack as
recipes name it (fix.yaml, profiles, pack.json; the selection itself is inimage.fixplan's), the derived
settings, the rules, the run-time guard the image carries, loading and validation.

May import: host. tests/test_layout.py holds the direction."""
