"""inimage/patches.py: each patch checked against the pack (sha256, the files it touches) and applied in
staging with git apply, or patch where git is absent; a failing patch changes nothing."""

import shutil

from .tree import GDN_ENV, PRISTINE, RUNNER, refused, sha


def test_corrupt_patch_refused_tree_untouched(cb):
    cb.rewrite_patch("hybrid-decode-pad", lambda text: "".join(text.splitlines(keepends=True)[:-3]))
    before = cb.snapshot()
    result = cb.apply()
    # Caught while reading the diffs, before anything is staged.
    refused(cb, before, result, "hybrid-decode-pad: patch hybrid-decode-pad/0001-vllm_gaudi.patch is not a usable "
            "-p1 unified diff: the last hunk is cut short")


def test_patch_touching_undeclared_file_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["gdn-prefix-cache"].update(targets=p["fixes"]["gdn-prefix-cache"]["targets"][:1]))
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(
        cb,
        before,
        result,
        f"gdn-prefix-cache: patch gdn-prefix-cache/0001-vllm_gaudi.patch touches vllm_gaudi/{RUNNER}, "
        "which gdn-prefix-cache does not list in its targets",
    )


def test_patch_file_sha_mismatch_refused(cb):
    patch = cb.patch_file("rope-cpu-cache")
    patch.write_text(patch.read_text() + " \n")
    before = cb.snapshot()
    result = cb.apply()
    refused(
        cb,
        before,
        result,
        f"rope-cpu-cache: patch rope-cpu-cache/0001-vllm_gaudi.patch has sha256 {sha(patch.read_bytes())}",
    )


def test_second_fix_failing_leaves_tree_byte_identical(cb):
    # rope-cpu-cache's context no longer matches what hybrid-decode-pad produced
    cb.rewrite_patch("rope-cpu-cache", lambda text: text.replace(" self.block_size = 128", " self.block_size = 256"))
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "rope-cpu-cache: patch rope-cpu-cache/0001-vllm_gaudi.patch does not apply", RUNNER)
    assert "self.pad_id = 0" in cb.read("vllm_gaudi", RUNNER)


def test_falls_back_to_patch_without_git(cb, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "patch").symlink_to(shutil.which("patch"))
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV, path=str(bin_dir))
    assert result.code == 0, result.out
    assert "with patch" in result.out
    assert cb.read("vllm_gaudi", RUNNER) == cb.expected[("vllm_gaudi", RUNNER)]
    assert cb.run("--revert", path=str(bin_dir)).code == 0
    assert cb.read("vllm_gaudi", RUNNER) == PRISTINE[("vllm_gaudi", RUNNER)]
