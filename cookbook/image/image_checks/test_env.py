"""Every environment variable of the recipe is set with its value; the image runs in the HPU mode its
fixes were applied for, with the variables they need (both from the manifest)."""

from inimage import fixplan


def test_recipe_env_set_with_values(image_env, expect):
    wrong = {k: (v, image_env.get(k)) for k, v in expect["env"].items() if image_env.get(k) != v}
    assert not wrong, "expected vs found: " + ", ".join(f"{k}={v!r} (found {f!r})" for k, (v, f) in wrong.items())


def test_env_seen_inside_the_container(host, expect):
    env = host.environment()
    assert {k: env.get(k) for k in expect["env"]} == expect["env"]


def test_mode_and_fix_env(image_env, expect):
    assert fixplan.hpu_mode(image_env) == expect["mode"], f"the fixes were applied for {expect['mode']} mode"
    wrong = {k: image_env.get(k) for k, v in expect["fix_env"].items() if image_env.get(k) != v}
    assert not wrong, f"the applied fixes need {expect['fix_env']}, found {wrong}"
