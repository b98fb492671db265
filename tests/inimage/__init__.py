"""Tests of inimage, the code the image runs (standard library only), one file per module."""
