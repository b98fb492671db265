"""cookbook/host/errors.py: the exit code an OSError gets at a task's edge (tasks.edge), by what failed: the
network's (3) or a path's (2), as the README's table says."""

import socket
import ssl
import urllib.error

import pytest
import requests
from invoke.exceptions import Exit

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
