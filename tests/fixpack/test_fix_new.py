"""cookbook/fixpack/fix_new.py: unified_diff, which fixes.new, fixes.verify --base and fixes.rebase write
their diffs with (a text diff, or a clear FixError, never a traceback, for bytes that are no text); the
files an edited copy changes, and the earlier fixes' lines it would revert. (new_fix as a whole runs in
tests/fixpack/test_fix_verify.py, against the release's sources.)"""

import pytest

from cookbook.fixpack.fix_new import changed_files, dropped_lines, unified_diff
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


def test_changed_files_are_the_edited_files_whose_bytes_differ(tmp_path):
    pristine, edited = tmp_path / "pristine", tmp_path / "edited"
    for root, files in ((pristine, {"a.py": "1\n", "sub/b.py": "2\n", "c.py": "3\n"}),
                        (edited, {"a.py": "1\n", "sub/b.py": "2 edited\n", "c.py": "3\n\n", "new.py": "4\n",
                                  "__pycache__/a.cpython-311.pyc": "x"})):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    # a new file is no fix of the release's code, and bytecode is not code
    assert changed_files(pristine, edited) == ["c.py", "sub/b.py"]


@pytest.mark.parametrize("pristine, earlier, edited, dropped", [
    (b"a\nb\n", b"a\nb\n", b"a\nc\n", []),  # no earlier fix touched the file
    (b"a\nb\n", b"a\nearly\nb\n", b"a\nearly\nb\nmine\n", []),  # made from the earlier fixes' copy
    (b"a\nb\n", b"a\nearly\nb\n", b"a\nb\nmine\n", ["early"]),  # made from the pristine release
    (b"a\n", b"a\nx\ny\n", b"a\ny\n", ["x"]),
])
def test_dropped_lines_are_what_the_earlier_fixes_added_and_the_edit_lacks(pristine, earlier, edited, dropped):
    assert dropped_lines(pristine, earlier, edited) == dropped
