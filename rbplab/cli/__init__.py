"""The `rbplab` command line (`rbplab --help`); `python -m rbplab` runs it too."""

from rbplab.cli.app import main

__all__ = ["main"]
