"""`RbplabError`: the base of every error rbplab raises for something a user can fix (a name
that resolves to nothing, a damaged cache entry, a missing run, a bad study file...).

Each such error also keeps its conventional base (ValueError, OSError, RuntimeError...), so
``except ValueError`` goes on working; ``except rbplab.RbplabError`` catches them all and
nothing else, which is how the command line tells a one-line error from a bug.
"""


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


class BadFileError(RbplabError, ValueError):
    """A file handed in that rbplab will not take (`rbplab.core.documents`): not a regular file,
    larger than its kind may be, nested too deeply, not valid JSON/TOML/YAML, or a field of the
    wrong type; the message names the file and the field."""
