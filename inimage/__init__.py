"""The code the image runs, as one package copied whole into every image (fixplan.IMAGE_LIB/inimage/):
the fix pack's applier (`python3 -m inimage.apply`, at build time and as the start-up `--check`),
fixplan (the fix selection), the recipe's rules and the settings they read, and runtime, the guard the
entrypoint checks its final command and environment with. The host imports the same modules (fix
selection, `invoke validate`, the k8s overrides), so none of them is written twice.

Standard library only, and nothing outside this package: the image's Python has no cookbook
dependencies. tests/test_layout.py holds that; below every stage of cookbook/, which may import it.
"""
