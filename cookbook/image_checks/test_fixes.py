"""The fix record in the image matches the recipe's profile and opt-ins, in order, and still holds."""

import json

RECORD = "/opt/cookbook/fix-record.json"


def test_fix_record_matches_recipe(host, expect):
    record = json.loads(host.file(RECORD).content_string)
    assert record["profile"] == expect["profile"]
    assert record["fixes"] == expect["fixes"], "applied fixes differ from the recipe's, in order"
    assert set(expect["not_written"]) <= set(record["not_in_pack"])


def test_fixed_sources_match_their_record(host):
    out = host.run("python3 /opt/cookbook/fixes/apply_all.py --check")
    assert out.rc == 0, out.stdout + out.stderr


def test_fix_labels_match_record(host, labels):
    record = json.loads(host.file(RECORD).content_string)
    assert labels.get("cookbook.fixes", "") == ",".join(record["fixes"])
