"""cookbook/fixpack/fix_new.py's unified_diff, which fixes.new, fixes.verify --base and fixes.rebase
write their diffs with: a text diff, or a clear FixError (never a traceback) for bytes that are no text."""

import pytest

from cookbook.fixpack.fix_new import unified_diff
from cookbook.host.errors import FixError


@pytest.mark.parametrize("before, after, want", [
    (b"a\nb\n", b"a\nc\n", "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"),
    (b"a\n", b"a", "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n"),
    ("# é\n".encode(), "# è\n".encode(), "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-# é\n+# è\n"),
    (b"a\n", b"a\n", ""),  # the same bytes: no diff
    (b"a\n", b"a\n\x00\x01", None),  # git: "Binary files differ"
    (b"a\n", "# café\n".encode("latin-1"), None),  # not UTF-8
])
def test_unified_diff(before, after, want):
    if want is None:
        with pytest.raises(FixError, match="x.py: no text diff"):
            unified_diff("x.py", before, after)
    else:
        assert unified_diff("x.py", before, after) == want
