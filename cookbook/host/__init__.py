"""The machine around the pipeline: errors and exit codes, the command line's edge (cli), paths, progress
output, the Docker engine, output folders, the upstream source cache, the grammar of values.

May import: the standard library, third-party packages and inimage (the image's own package, below every
stage, which every stage may import); no other stage. tests/test_layout.py holds the direction."""
