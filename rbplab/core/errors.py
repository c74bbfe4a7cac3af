"""The errors rbplab raises for what a user can fix, and how they name things: `RbplabError` and
the "did you mean" every error that lists known names gives.

Names as users see them: the "did you mean" of every error that lists known names, and the
natural order names with step numbers are listed in.

Families, corpora, models and subcommands are all matched the same way (difflib's ratio, case
folded), so a typo anywhere gets the same kind of hint.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class RbplabError(Exception):
    """An error the user can act on; its message is one line that says what to do."""


# The general kinds, for checks that belong to no more specific error of their module. Each keeps
# the builtin a caller would catch (a bad value is still a ValueError).
class InvalidArgumentError(RbplabError, ValueError):
    """A value passed in that the call cannot take (out of range, unknown name, wrong shape)."""


class InvalidTypeError(RbplabError, TypeError):
    """An argument of a type the call cannot take."""


class NotFoundError(RbplabError, KeyError):
    """A run, table, k or step asked for that is not there; the message lists what is."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingFileError(RbplabError, FileNotFoundError):
    """A file or folder the call needs that is not there; the message says how to get it."""


class MissingDependencyError(RbplabError, ImportError):
    """An optional package a feature needs that is not installed; the message names the extra."""


class RunFailedError(RbplabError, RuntimeError):
    """Work that could not be completed (failed extraction units, a view used the wrong way)."""


class RbplabWarning(UserWarning):
    """Something rbplab did on the user's behalf that they should know of (a damaged entry
    recomputed, a summary derived again, a record ignored). Its message is one line that says what
    was found and what was done; a UserWarning, so the filters that take those take it. The command
    line shows it as one `rbplab: warning: ...` line; elsewhere Python's warnings machinery shows
    it, at the caller's line (each call passes the stacklevel of the user's code)."""


class BadFileError(RbplabError, ValueError):
    """A file handed in that rbplab will not take (`rbplab.core.documents`): not a regular file,
    larger than its kind may be, nested too deeply, not valid JSON/TOML/YAML, or a field of the
    wrong type; the message names the file and the field."""


def closest(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The known names most like `name` (at most `n`, best first), compared case-insensitively;
    empty when none is close enough."""
    by_folded: dict[str, str] = {}
    for candidate in known:
        by_folded.setdefault(str(candidate).lower(), str(candidate))
    matches = difflib.get_close_matches(str(name).lower(), list(by_folded), n=n, cutoff=cutoff)
    return [by_folded[m] for m in matches]


def did_you_mean(name: str, known: Iterable[str], n: int = 3) -> str:
    """ " (did you mean 'x'?)" (or "'x' or 'y'") naming the known names closest to `name`, to put
    right after the name in an error message; "" when none is close."""
    matches = closest(name, known, n=n)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"


def natural_sorted(names: Iterable[str]) -> list[str]:
    """`names` with their digit runs compared as numbers (step2 before step10), as revision and
    branch names are listed."""
    return sorted(names, key=_natural_key)


def _natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))
