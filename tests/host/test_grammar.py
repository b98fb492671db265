"""The grammars by role: what each accepts and refuses, table-driven."""

import pytest

from cookbook.host import grammar

CASES = [
    ("env_name", "VLLM_COMPACT_GDN", True), ("env_name", "_x1", True), ("env_name", "1X", False),
    ("env_name", "A-B", False), ("env_name", "A=B", False), ("env_name", "A B", False), ("env_name", "", False),
    ("env_name", "A\nRUN x", False),
    ("slug", "v0.26.0", True), ("slug", "gdn-prefix-cache", True), ("slug", "../v0.26.0", False),
    ("slug", "a/b", False), ("slug", ".hidden", False), ("slug", "Upper", False), ("slug", "-x", False),
    ("ident", "qwen3_coder", True), ("ident", "1.24.1", True), ("ident", "--trust-remote-code", False),
    ("ident", "a b", False), ("ident", "a;b", False),
    ("model_id", "Qwen/Qwen3.5-27B-FP8", True), ("model_id", "gpt2", True), ("model_id", "-x/y", False),
    ("model_id", "a/b/c", False), ("model_id", "a/../b", False),
    ("image_ref", "vault.habana.ai/gaudi-docker/1.24.1/ubuntu24.04/habanalabs/vllm-0.26.0-ptupstream-2.11.0:latest",
     True),
    ("image_ref", "localhost:5000/x/y:1.0", True), ("image_ref", "debian", True), ("image_ref", "Debian", False),
    ("image_ref", "x:y z", False), ("image_ref", "x\nRUN id", False), ("image_ref", "x:-tag", False),
    ("abs_path", "/usr/local/lib/python3.12/dist-packages", True), ("abs_path", "relative/x", False),
    ("abs_path", "/a/../etc", False), ("abs_path", "/a/./b", False), ("abs_path", "/a b", False),
    ("url_path", "/health", True), ("url_path", "/v1/models", True), ("url_path", "health", False),
    ("url_path", "/h?x=1", False), ("url_path", "//evil.example", True),  # still a path on 127.0.0.1
    ("python", "3.12", True), ("python", "3.12; id", False),
]


@pytest.mark.parametrize("role,value,ok", CASES, ids=[f"{c[0]}:{c[1]!r}" for c in CASES])
def test_role(role, value, ok):
    said = grammar.problem(role, value)
    assert (said is None) == ok, said


@pytest.mark.parametrize("value,found", [
    ("plain", None), ("tab\there", "U+0009"), ("line\nbreak", "U+000A"), ("nul\x00", "U+0000"),
    ("del\x7f", "U+007F"), ("c1\x85", "U+0085"), ("sep\u2028", "U+2028"), ("naïve ✓", None),
])
def test_control_characters(value, found):
    said = grammar.control_char(value)
    assert (said is None) if found is None else (found in said)


def test_prose_may_break_lines_but_nothing_else():
    assert grammar.text_problem("a\nb", allow="\n") is None
    assert "U+000D" in grammar.text_problem("a\r\nb", allow="\n")


@pytest.mark.parametrize("ref,name_only,ok", [
    ("reg.example/org/name:1.0", False, True), ("gaudi-cookbook", True, True), ("Gaudi", True, False),
    ("x:" + "a" * 129, False, False), ("reg/x:y", True, False), ("a" * 256, True, False),
])
def test_tags_and_repositories(ref, name_only, ok):
    assert (grammar.image_ref_problem(ref, name_only) is None) == ok


@pytest.mark.parametrize("ref,said", [
    ("reg.example:5000/x/y:1@sha256:" + "a" * 64, None), ("x/y", None),
    ("x/y@sha256:abc", "64 lower-case hex"), ("x/y@md5:" + "a" * 64, "64 lower-case hex"),
    ("--help", "image"), ("X/Y@sha256:" + "a" * 64, "image"),
])
def test_image_references_with_a_digest(ref, said):
    got = grammar.image_problem(ref)
    assert got is None if said is None else said in got
