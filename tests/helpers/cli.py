"""The one way tests run the `rbplab` command line in this process."""

from __future__ import annotations

import pytest

from rbplab.cli.app import main


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """`rbplab ARGV...` through `main`: (exit status, stdout, stderr). Each argument is passed as
    its `str` (a Path or a number as the shell would pass it); capsys is read, so each call sees
    only its own output."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err
