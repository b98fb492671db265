"""The fix record in the image matches the recipe's profile and opt-ins, in order, and still holds."""

import json
import shlex

from cookbook.host.names import Label
from inimage import fixplan


def test_fix_record_matches_recipe(host, expect):
    record = json.loads(host.file(expect["paths"]["record"]).content_string)
    assert record["profile"] == expect["profile"]
    assert record["fixes"] == expect["fixes"], "applied fixes differ from the recipe's, in order"
    assert set(expect["not_written"]) <= set(record["not_in_pack"])


def test_fixed_sources_match_their_record(host, expect):
    out = host.run(shlex.join(fixplan.apply_argv("--check")))  # as the entrypoint runs it at every start
    assert out.rc == 0, out.stdout + out.stderr


def test_fix_labels_match_record(host, labels, expect):
    record = json.loads(host.file(expect["paths"]["record"]).content_string)
    assert labels.get(Label.FIXES, "") == ",".join(record["fixes"])
