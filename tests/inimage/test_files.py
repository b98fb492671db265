"""inimage/files.py: the files are replaced all or nothing: a failure while replacing them or writing the
record puts every file back."""

import os

from inimage import apply, files

from .tree import PROFILE, Result, refused


def test_failure_while_replacing_files_rolls_back(cb, monkeypatch, capsys):
    monkeypatch.delenv("VLLM_COMPACT_GDN", raising=False)
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", flaky_replace)
    before = cb.snapshot()
    args = ["--profile", PROFILE, "--site", str(cb.site), "--record", str(cb.record), "--pack", str(cb.pack_path)]
    code = apply.main(args)
    out = capsys.readouterr()
    refused(cb, before, Result(code, out.out + out.err), "No space left on device", "every file was restored")
    assert len(calls) > 2  # the first replaced file was put back


def test_unwritable_record_rolls_back(cb):
    blocker = cb.root / "not-a-dir"
    blocker.write_text("")
    before = cb.snapshot()
    result = cb.run("--profile", PROFILE, record=blocker / "fix-record.json")
    assert result.code == 1, result.out
    assert "could not write the record" in result.out and "every file was restored" in result.out
    assert cb.snapshot() == before
