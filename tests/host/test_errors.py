"""cookbook/host/errors.py: the one mapping from what reaches a task's edge to the README's exit codes and
the `error:`/`fix:` lines, text from outside made printable; an OSError's code by what failed: the
network's (3) or a path's (2)."""

import socket
import ssl
import urllib.error

import pytest
import requests
from invoke.exceptions import Exit

from cookbook.host import cli, errors
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
    with pytest.raises(Exit) as err, cli.edge():
        raise exc
    assert err.value.code == code
    assert capsys.readouterr().err.strip() == words


# Every class of the tree and the README's code for it (a class added without a row here fails below).
CODES = {
    errors.CookbookError: 1, errors.CheckFailure: 1, errors.SmokeFailure: 1, errors.BuildError: 1,
    errors.ManifestError: 1, errors.HostError: 1, errors.PublishError: 1, errors.PackFailure: 1,
    errors.ChainStopped: 1,
    errors.UsageError: 2, errors.RecipeError: 2, errors.FixError: 2, errors.ImageMissing: 2,
    errors.UpstreamError: 3, errors.EngineError: 3, errors.WeightsError: 3, errors.PullError: 3,
    errors.PackDiffers: 4,
}


def tree(cls=errors.CookbookError):
    return [cls] + [sub for child in cls.__subclasses__() for sub in tree(child)]


def test_every_class_of_the_tree_has_its_readme_code():
    ours = {cls for cls in tree() if cls.__module__ == errors.__name__}
    assert ours == set(CODES)
    assert {cls: errors.exit_code(cls("x")) for cls in ours} == CODES


@pytest.mark.parametrize("exc, lines", [
    (errors.RecipeError("unknown recipe 'x'"), ["error: unknown recipe 'x'"]),
    (errors.RecipeError("bad key", where="r.yaml:3 (key a.b)", hint="drop it"),
     ["error: bad key", "  at: r.yaml:3 (key a.b)", "fix: drop it"]),
    (errors.PackDiffers("the pack applies, files differ\nsecond", hint="invoke fixes.rebase --base B"),
     ["error: the pack applies, files differ", "second", "fix: invoke fixes.rebase --base B"]),
    (errors.CheckFailure("model \x1b[31mred\x07"), ["error: model \\x1b[31mred\\x07"]),  # a server's words, not obeyed
    (FileNotFoundError(2, "No such file or directory", "/nope"), ["error: No such file or directory: /nope"]),
])
def test_error_lines(exc, lines):
    assert errors.error_lines(exc) == lines


@pytest.mark.parametrize("exc, code", [(ValueError("bug"), 1), (ConnectionRefusedError(111, "refused"), 3),
                                       (PermissionError(13, "denied", "/x"), 2)])
def test_exit_code_outside_the_tree(exc, code):
    assert errors.exit_code(exc) == code


@pytest.mark.parametrize("cls", sorted(CODES, key=lambda c: c.__name__))
def test_the_edge_says_error_and_fix_and_exits_with_the_code(capsys, cls):
    with pytest.raises(Exit) as err, cli.edge():
        raise cls("what went wrong", hint="how to mend it")
    assert err.value.code == CODES[cls]
    assert capsys.readouterr().err.splitlines() == ["error: what went wrong", "fix: how to mend it"]
