"""Stand-in for the bridge's runtime configuration: settings are accepted and ignored."""

import contextlib


@contextlib.contextmanager
def env_setting(name, value):
    yield
