"""The code the image runs, as one package copied whole into every image (fixplan.IMAGE_LIB/inimage/):
the fix pack's applier (`python3 -m inimage.apply`, at build time and as the start-up `--check`) and
fixplan, the fix selection the cookbook uses on the host too.

Standard library only, and nothing outside this package: the image's Python has no cookbook
dependencies. tests/test_layout.py holds that; below every stage of cookbook/, which may import it.
"""
