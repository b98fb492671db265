"""The machine around the pipeline: errors and exit codes, the command line's edge (cli), paths, progress
output, the Docker engine, output folders, the upstream source cache, the grammar of values.

May import: the standard library and third-party packages only; no other stage. tests/test_layout.py holds the
direction."""
