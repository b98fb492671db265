"""inimage/record.py: what the fix record says, file by file."""

import json

from .tree import GDN_ENV, PRISTINE, PROFILE, RUNNER, sha


def test_record_content(cb):
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    assert result.code == 0, result.out
    record = cb.record_json()
    assert cb.record.read_text() == json.dumps(record, indent=2, sort_keys=True) + "\n"
    assert record["format"] == 1 and record["profile"] == PROFILE
    assert record["pack_sha256"] == sha(cb.pack_path.read_bytes())
    assert record["fixes"] == ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache"]
    assert record["not_in_pack"] == ["prompt-order", "whitespace-free-forced-tool-calls"]
    assert record["skipped"] == {}
    assert record["env"] == GDN_ENV
    gaudi, vllm = record["packages"]["vllm_gaudi"], record["packages"]["vllm"]
    assert gaudi == {"location": str(cb.site / "vllm_gaudi"), "version": "0.26.0", "commit": "b059f9c9", "notes": []}
    assert vllm["commit"] == "ffd46bfab" and "accepted" in vllm["notes"][0]
    files = {(f["package"], f["path"]): f for f in record["files"]}
    assert set(files) == {("vllm", "v1/sample/sampler.py"), ("vllm_gaudi", RUNNER), ("vllm_gaudi", "ops/hpu_gdn.py")}
    for key, entry in files.items():
        assert entry["before"] == sha(PRISTINE[key])
        assert entry["after"] == sha(cb.read(*key)) == sha(cb.expected[key])
    assert files[("vllm_gaudi", RUNNER)]["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache"]
