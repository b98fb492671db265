"""The tools that write, prove and port the fix pack: its sources, verify, new, the CPU fix lab and the
pack's host-sync cost, drift to the next release, a base image's own files.

May import: host, recipe, image, prove. tests/test_layout.py holds the direction."""
