"""cookbook/release/registry.py: target parsing, plain HTTP only on the loopback, where credentials come
from (table-tested), and that a password never reaches an auth file anyone else can read or an
error message. The registry calls themselves run against a real registry in test_publish.py."""

import json
import stat

import pytest

from cookbook.host.errors import PublishError, UsageError
from cookbook.release import registry


@pytest.mark.parametrize("host,plain", [
    ("127.0.0.1:5000", True), ("127.5.5.5", True), ("localhost:5000", True), ("[::1]:5000", True),
    ("ghcr.io", False), ("10.0.0.1:5000", False), ("registry.example.com:443", False),
])
def test_plain_http_only_on_the_loopback(host, plain):
    assert registry.plain_http(host) is plain


@pytest.mark.parametrize("target,split", [
    ("127.0.0.1:5000", ("127.0.0.1:5000", "")),
    ("ghcr.io/my-org", ("ghcr.io", "my-org")),
    ("ghcr.io/my-org/team/", ("ghcr.io", "my-org/team")),
    ("docker://quay.io/x", ("quay.io", "x")),
    ("[::1]:5000/ns", ("[::1]:5000", "ns")),
    ("localhost:5000/a.b/c_d", ("localhost:5000", "a.b/c_d")),
])
def test_split_target(target, split):
    assert registry.split_target(target) == split


@pytest.mark.parametrize("target", ["", "https://ghcr.io/x", "ghcr.io/x@sha256:00", "--help", "-r", "a b",
                                    "host:port", "ghcr.io/My-Org", "ghcr.io/org/../x", "[::zz]:5000", "ghcr.io\n/x",
                                    "ghcr.io/-x"])
def test_bad_targets_are_refused_as_a_usage_mistake(target):
    with pytest.raises(UsageError, match="HOST"):
        registry.split_target(target)


@pytest.mark.parametrize("env,config,source", [
    ({registry.USER_ENV: "u", registry.PASSWORD_ENV: "p"}, True, "env"),
    ({registry.USER_ENV: "u", registry.PASSWORD_ENV: "p"}, False, "env"),
    ({}, True, "docker-config"),
    ({}, False, "none"),
])
def test_credential_source(env, config, source):
    assert registry.credential_source(env, config) == source


@pytest.mark.parametrize("env", [{registry.USER_ENV: "u"}, {registry.PASSWORD_ENV: "p"}])
def test_half_a_credential_is_refused_without_the_password(env):
    with pytest.raises(PublishError, match="go together") as err:
        registry.credential_source(env, False)
    assert "p" not in str(err.value).split("go together")[1].replace(registry.PASSWORD_ENV, "")


def test_env_credentials_go_to_a_private_temporary_auth_file(tmp_path):
    env = {registry.USER_ENV: "me", registry.PASSWORD_ENV: "s3cret-pw", "HOME": str(tmp_path)}
    with registry.credentials("127.0.0.1:5000", env) as creds:
        path = creds.authfile
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert set(json.loads(path.read_text())["auths"]) == {"127.0.0.1:5000"}
        assert "s3cret-pw" not in creds.source
        assert creds.scrub("denied for me:s3cret-pw") == "denied for me:***"
    assert not path.exists()


def test_docker_config_is_used_where_no_env_credentials(tmp_path):
    (tmp_path / "config.json").write_text('{"auths": {}}')
    with registry.credentials("ghcr.io", {"DOCKER_CONFIG": str(tmp_path)}) as creds:
        assert creds.authfile == tmp_path / "config.json" and str(tmp_path) in creds.source
    with registry.credentials("ghcr.io", {"HOME": str(tmp_path / "nobody")}) as creds:
        assert creds.authfile is None and "anonymous" in creds.source


@pytest.mark.parametrize("err,said", [
    ("reading manifest x in 127.0.0.1:5000/team/p: manifest unknown", "not found"),
    ("initializing source docker://h/p:t: invalid status code from registry 404 (Not Found)", "not found"),
    ("unauthorized: authentication required", "denied"),
    ("requested access to the resource is denied", "denied"),
    ("invalid status code from registry 403 (Forbidden)", "denied"),
    ("received unexpected HTTP status: 401 Unauthorized", "denied"),
    # Seen in CI: an attachment tag whose digest begins with 403 read as a refusal.
    ("reading manifest sha256-403294889af5993d03196e5b18c5c3b84655956fdb6e8223eef37d638fc81491.sbom in "
     "127.0.0.1:43769/team/publish-test: manifest unknown", "not found"),
    ("manifest unknown at 127.0.0.1:40312/team/p@sha256:0a4019f3e4d401", "not found"),
    ("pinging container registry 127.0.0.1:40412: connection refused", None),
])
def test_classify_reads_status_codes_only_where_they_stand_alone(err, said):
    assert registry.classify(err) == said
