"""Every environment variable of the recipe is set with its value; nothing it forbids is."""


def test_recipe_env_set_with_values(image_env, expect):
    wrong = {k: (v, image_env.get(k)) for k, v in expect["env"].items() if image_env.get(k) != v}
    assert not wrong, "expected vs found: " + ", ".join(f"{k}={v!r} (found {f!r})" for k, (v, f) in wrong.items())


def test_env_seen_inside_the_container(host, expect):
    env = host.environment()
    assert {k: env.get(k) for k in expect["env"]} == expect["env"]


def test_nothing_forbidden_set(image_env, expect):
    bad = {k: v for k, v in expect["forbidden_env"].items() if image_env.get(k) == v}
    assert not bad, f"the recipe forbids {bad}"
