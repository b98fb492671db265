"""A recipe made into an image: the build context, the build, the stand-in and CPU bases, the pipeline steps the
tasks call, and the checks an image must pass (image_checks/).

May import: host, recipe. tests/test_layout.py holds the direction."""
