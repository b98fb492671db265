"""The importer: vllm-gaudi's own .cd/ defaults at the release's commit, run through upstream's autocalc from
the upstream cache, become a recipe per model and card type with every value's source; the committed
recipes match it (`--check`); what the cookbook sets otherwise says why; a failure writes nothing."""

import json
import math
import shutil
import subprocess
import sys

import pytest
import yaml

from cookbook.host.errors import RecipeError, UpstreamError
from cookbook.host.paths import RECIPES, ROOT
from cookbook.recipe import catalogue, recipes

CELLS = [
    ("", None), ("TRUE", True), ("FALSE", False), ("2048", 2048), ("1.41107E+11", 1.41107e11), ("0.5", 0.5),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
]


@pytest.mark.parametrize("text, value", CELLS)
def test_a_cell_reads_as_upstreams_pandas_reads_it(text, value):
    got = catalogue._cell(text)
    assert math.isnan(got) if value is None else (got == value and type(got) is type(value))


def test_a_column_with_a_float_or_an_empty_cell_is_all_floats():
    rows = catalogue.read_rows("A,B,C,D\n1,,2,TRUE\n3,128,2.5,FALSE\n")
    assert [line for line, _ in rows] == [2, 3]
    (_, first), (_, second) = rows
    assert math.isnan(first["B"]) and second["B"] == 128.0 and type(second["B"]) is float
    assert first["A"] == 1 and type(first["A"]) is int and type(first["C"]) is float and first["D"] is True


@pytest.fixture(scope="module")
def imports(upstream_cache):
    return catalogue.make()


def imported(result, rid: str) -> dict:
    return yaml.safe_load(next(m.text for m in result.made if m.rid == rid))


def test_every_model_of_upstreams_table_on_each_card_that_its_autocalc_allows(imports):
    up = catalogue.read_upstream(recipes.load("qwen3.5-27b-fp8").release.vllm_gaudi.commit)
    models = {row["MODEL"] for _, row in up.rows}
    assert len(models) == 20 and len(imports.made) == 39  # 20 models x 2 cards, less one upstream refuses
    assert "upstream's autocalc refuses it" in imports.skipped["meta-llama/Llama-3.1-405B-Instruct on Gaudi 2"]
    assert "756.0 GB of weights on 8 x 96 GB" in imports.skipped["meta-llama/Llama-3.1-405B-Instruct on Gaudi 2"]
    assert "no row in .cd/server/settings_vllm.csv" in imports.skipped["meta-llama/Llama-3.2-11B-Vision-Instruct"]


def test_a_recipe_carries_upstreams_values_and_names_each_ones_source(imports):
    """Llama 3.1 8B on one Gaudi 2, by hand from upstream's rules: 96 GB - 2 unavailable - 14.96 GB of
    weights = 79.04 GB usable; 1 - 9/79.04 -> utilization 0.88; a 4,352-token sequence's KV cache is
    2 x 4352 x 32 layers x 128 x 8 heads x 2 B = 0.53 GB; the graph reserve 0.04; so (79.04 x 0.88 x 0.96)
    / 0.53 = 125 sequences, rounded down to the decode step of 32: 96."""
    r = imported(imports, "llama-3.1-8b-instruct-gaudi2")
    assert r["serve"]["gpu_memory_utilization"] == 0.88 and r["serve"]["max_num_seqs"] == 96
    assert r["env"]["VLLM_GRAPH_RESERVED_MEM"] == "0.04"
    assert r["hardware"] == {"accelerator": "gaudi2", "cards": 1, "tensor_parallel": 1}
    assert r["model"]["geometry"]["head_dim"] == 128  # 4096 / 32 heads: upstream's rule, no HEAD_DIM in the row
    sources = r["provenance"]["sources"]
    assert sources["serve.max_model_len"] == ".cd/server/settings_vllm.csv line 2 " \
                                             "(meta-llama/Llama-3.1-8B-Instruct), column MAX_MODEL_LEN"
    assert sources["serve.max_num_seqs"].startswith(".cd/server/vllm_autocalc_rules.py calc_MAX_NUM_SEQS (GAUDI2 = 96")
    assert r["provenance"]["commit"] == recipes.load("qwen3.5-27b-fp8").release.vllm_gaudi.commit
    # every value of the recipe's own (the release's base and profile aside) has a source or an override
    said = set(sources) | set(r["provenance"]["overrides"])
    for section in ("serve", "env", "hardware"):
        assert {f"{section}.{k}" for k in r[section]} <= said
    g3 = imported(imports, "llama-3.1-8b-instruct-gaudi3")
    assert g3["serve"]["max_num_seqs"] > r["serve"]["max_num_seqs"]  # 128 GB cards hold more sequences
    multi = imported(imports, "llama-3.1-70b-instruct-gaudi2")
    assert multi["hardware"]["cards"] == multi["serve"]["tensor_parallel_size"] == 4
    assert multi["env"]["PT_HPU_ENABLE_LAZY_COLLECTIVES"] == "True"
    assert imported(imports, "qwen2.5-vl-7b-instruct-gaudi2")["model"]["modalities"] == ["text", "image"]


def test_the_committed_recipes_are_what_the_importer_makes(upstream_cache):
    out = subprocess.run([sys.executable, "-m", "invoke", "recipes.import", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = json.loads((RECIPES / catalogue.SUMMARY).read_text())["recipes"]
    assert len(listed) == 39 and all(recipes.load(rid).recipe.provenance for rid in listed)


def scratch_tree(tmp_path):
    """A copy of recipes/ (catalogue.yaml, the generated recipes, the hand-written ones)."""
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES, root)
    return root


def test_check_names_a_changed_recipe_and_a_run_mends_it_removing_only_what_it_generated(upstream_cache, tmp_path):
    root = scratch_tree(tmp_path)
    changed = root / "meta-llama" / "Llama-3.1-8B-Instruct-Gaudi2" / "recipe.yaml"
    changed.write_text(changed.read_text().replace("max_num_seqs: 96", "max_num_seqs: 97"))
    stale = root / "meta-llama" / "Llama-9-Gaudi2" / "recipe.yaml"
    stale.parent.mkdir()
    stale.write_text(changed.read_text())  # generated (its header says so), but no longer made
    with pytest.raises(RecipeError, match="Llama-3.1-8B-Instruct-Gaudi2/recipe.yaml, meta-llama/Llama-9"):
        catalogue.run(check=True, root=root)
    catalogue.run(root=root)
    assert "max_num_seqs: 96" in changed.read_text() and not stale.parent.exists()
    assert (root / "Qwen" / "Qwen3.5-27B-FP8" / "recipe.yaml").is_file()  # written by hand: never touched
    catalogue.run(check=True, root=root)


def with_facts(root, change) -> None:
    path = root / catalogue.FACTS
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_an_override_is_the_value_and_says_why(upstream_cache, tmp_path):
    root = scratch_tree(tmp_path)
    why = "a card shared with another server keeps a quarter of its memory"
    with_facts(root, lambda d: d["overrides"].update({"meta-llama/Llama-3.1-8B-Instruct": {
        "serve.gpu_memory_utilization": {"value": 0.75, "why": why}}}))
    result = catalogue.run(root=root)
    for rid in ("llama-3.1-8b-instruct-gaudi2", "llama-3.1-8b-instruct-gaudi3"):
        r = imported(result, rid)
        assert r["serve"]["gpu_memory_utilization"] == 0.75
        assert r["provenance"]["overrides"]["serve.gpu_memory_utilization"] == why
        assert "serve.gpu_memory_utilization" not in r["provenance"]["sources"]
    assert imported(result, "llama-3.2-1b-instruct-gaudi2")["serve"]["gpu_memory_utilization"] == 0.96


def test_a_recipe_that_breaks_a_rule_writes_nothing(upstream_cache, tmp_path):
    root = scratch_tree(tmp_path)
    with_facts(root, lambda d: d["overrides"].update({"Qwen/Qwen3-0.6B": {
        "serve.max_model_len": {"value": 65536, "why": "longer"}}}))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(RecipeError, match=r"context-within-native.*65,536 is past the model's native context") as err:
        catalogue.run(root=root)
    assert str(root) in str(err.value) and "cookbook-import." not in str(err.value)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_model_upstream_adds_is_refused_until_the_catalogue_says_what_it_is(upstream_cache, tmp_path):
    root = scratch_tree(tmp_path)
    with_facts(root, lambda d: d["models"].pop("speakleash/Bielik-4.5B-v3.0-Instruct"))
    with pytest.raises(RecipeError, match="does not know: speakleash/Bielik-4.5B-v3.0-Instruct") as err:
        catalogue.make(root)
    assert err.value.exit_code == 2 and "left_out" in err.value.hint
    with_facts(root, lambda d: d["left_out"].update({"speakleash/Bielik-4.5B-v3.0-Instruct": "not today"}))
    assert catalogue.make(root).skipped["speakleash/Bielik-4.5B-v3.0-Instruct"] == "not today"


def upstream_copy(tmp_path, monkeypatch, edit):
    """The cached vllm-gaudi tree, copied and edited, standing in for the cache entry of its commit."""
    from cookbook.host import upstream

    commit = recipes.load("qwen3.5-27b-fp8").release.vllm_gaudi.commit
    tree = tmp_path / "vllm-gaudi"
    shutil.copytree(upstream.vllm_gaudi_dir(commit), tree, ignore=shutil.ignore_patterns("tests", "vllm_gaudi"))
    edit(tree)
    monkeypatch.setattr(upstream, "vllm_gaudi_dir", lambda c: tree)


def test_the_autocalc_run_is_upstreams_own_module_from_the_cache(upstream_cache, tmp_path, monkeypatch):
    def seven_sequences(tree):
        rules = tree / ".cd" / "server" / "vllm_autocalc_rules.py"
        rules.write_text(rules.read_text().replace('"MAX_NUM_SEQS": calc_MAX_NUM_SEQS,',
                                                   '"MAX_NUM_SEQS": lambda ctx: 7,'))

    upstream_copy(tmp_path, monkeypatch, seven_sequences)
    assert imported(catalogue.make(), "qwen2.5-7b-instruct-gaudi3")["serve"]["max_num_seqs"] == 7


def test_a_release_without_the_cd_layout_is_named(upstream_cache, tmp_path, monkeypatch):
    upstream_copy(tmp_path, monkeypatch, lambda tree: (tree / ".cd" / "server" / "settings_vllm.csv").unlink())
    with pytest.raises(UpstreamError, match=r"has no \.cd/server/settings_vllm\.csv"):
        catalogue.make()
