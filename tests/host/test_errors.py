"""cookbook/host/errors.py: the exit code an OSError gets at a task's edge (tasks.edge), by what failed: the
network's (3) or a path's (2), as the README's table says; each error class's code; an error's lines (what,
at, fix); and text from outside made printable."""

import socket
import ssl
import urllib.error

import pytest
import requests
from invoke.exceptions import Exit

from cookbook.host import errors
from cookbook.host.errors import ENGINE_OR_NETWORK, USER_MISTAKE, os_error_code


@pytest.mark.parametrize("exc, code", [
    (ConnectionRefusedError(111, "Connection refused"), ENGINE_OR_NETWORK),
    (ConnectionResetError(104, "Connection reset by peer"), ENGINE_OR_NETWORK),
    (TimeoutError("timed out"), ENGINE_OR_NETWORK),
    (socket.gaierror(-2, "Name or service not known"), ENGINE_OR_NETWORK),
    (ssl.SSLError(1, "certificate verify failed"), ENGINE_OR_NETWORK),
    (urllib.error.URLError("refused"), ENGINE_OR_NETWORK),
    (requests.exceptions.ConnectionError("refused"), ENGINE_OR_NETWORK),
    (requests.exceptions.ReadTimeout("slow"), ENGINE_OR_NETWORK),
    (FileNotFoundError(2, "No such file or directory", "/nope"), USER_MISTAKE),
    (PermissionError(13, "Permission denied", "/root/x"), USER_MISTAKE),
    (IsADirectoryError(21, "Is a directory", "/tmp"), USER_MISTAKE),
    (OSError(28, "No space left on device"), USER_MISTAKE),
])
def test_os_error_code(exc, code):
    assert os_error_code(exc) == code


@pytest.mark.parametrize("exc, code, words", [
    (ConnectionRefusedError(111, "Connection refused"), 3, "error: Connection refused"),
    (TimeoutError("timed out"), 3, "error: timed out"),
    (FileNotFoundError(2, "No such file or directory", "/nope"), 2, "error: No such file or directory: /nope"),
])
def test_the_task_edge_exits_with_it(capsys, exc, code, words):
    import tasks

    @tasks.edge
    def fails():
        raise exc

    with pytest.raises(Exit) as err:
        fails()
    assert err.value.code == code
    assert capsys.readouterr().err.strip() == words


@pytest.mark.parametrize("error, code", [
    (errors.UsageError, 2), (errors.RecipeError, 2), (errors.FixError, 2),
    (errors.UpstreamError, 3), (errors.EngineError, 3), (errors.WeightsError, 3), (errors.PullError, 3),
    (errors.BuildError, 1), (errors.CheckFailure, 1), (errors.ManifestError, 1), (errors.HostError, 1),
    (errors.PublishError, 1), (errors.CookbookError, 1),
])
def test_each_error_has_the_readmes_exit_code(error, code):
    assert error("x").exit_code == code and issubclass(error, errors.CookbookError)


@pytest.mark.parametrize("kw, text", [
    ({}, "what went wrong"),
    ({"where": "recipe.yaml:3 (key a.b)"}, "what went wrong\n  at: recipe.yaml:3 (key a.b)"),
    ({"hint": "quote it"}, "what went wrong\n  fix: quote it"),
    ({"where": "f:1", "hint": "h"}, "what went wrong\n  at: f:1\n  fix: h"),
])
def test_an_error_says_what_where_and_the_fix(kw, text):
    assert str(errors.RecipeError("what went wrong", **kw)) == text


@pytest.mark.parametrize("args, text", [
    (("recipe.yaml",), "recipe.yaml"), (("recipe.yaml", 3), "recipe.yaml:3"),
    (("recipe.yaml", 3, "server.env"), "recipe.yaml:3 (key server.env)"), (("f", None, "k"), "f (key k)"),
])
def test_where(args, text):
    assert errors.where(*args) == text


@pytest.mark.parametrize("text, shown", [
    ("tiny", "tiny"), ("a b", "a b"), ("café ü", "café ü"),
    ("tiny\x1b[2J", r"tiny\x1b[2J"), ("a\r\nb", r"a\r\nb"), ("bell\x07", r"bell\x07"), ("tab\t", r"tab\t"),
    (42, "42"),
])
def test_printable_shows_control_characters_instead_of_obeying_them(text, shown):
    assert errors.printable(text) == shown
