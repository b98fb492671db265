"""cookbook/host/progress.py: messages on stderr (stdout stays for results), with the elapsed time, and
what they quote from outside shown, not obeyed: control characters escaped, Rich markup printed as text."""

import re

import pytest

from cookbook.host import progress


@pytest.mark.parametrize("message,shown", [
    ("building x", "building x"),
    ("[bold]not bold[/bold]", "[bold]not bold[/bold]"),  # a file name or a server's words, not markup
    ("model tiny\x1b[2J\x07", r"model tiny\x1b[2J\x07"),
    ("two\nlines\r", "two\nlines\\r"),  # a message's own lines stay lines; a carriage return is shown
])
def test_say(capsys, message, shown):
    progress.say(message)
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(r" *\d+\.\d(s) (.*)\n", err, re.S).group(2) == shown, err
    assert "\x1b" not in err and "\x07" not in err


@pytest.mark.parametrize("text,shown", [("log line", "log line\n"), ("ends\n", "ends\n"), ("", "\n")])
def test_line_is_raw_with_one_newline(capsys, text, shown):
    progress.line(text)
    assert capsys.readouterr() == ("", shown)


def test_the_console_writes_to_stderr(capsys):
    progress.console().print("bar")
    assert capsys.readouterr() == ("", "bar\n")
