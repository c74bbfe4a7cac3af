"""`RbplabError`: the base of every error rbplab raises for something a user can fix (a name
that resolves to nothing, a damaged cache entry, a missing run, a bad study file...).

Each such error also keeps its conventional base (ValueError, OSError, RuntimeError...), so
``except ValueError`` goes on working; ``except rbplab.RbplabError`` catches them all and
nothing else, which is how the command line tells a one-line error from a bug.
"""


class RbplabError(Exception):
    """An error the user can act on; its message is one line that says what to do."""
