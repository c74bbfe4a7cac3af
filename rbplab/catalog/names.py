"""What a model, family or corpus name may be before it is looked up: not empty, no NUL
character, at most MAX_NAME_CHARS characters; and a path lookup that a name too long for the
file system answers with "no such path" instead of an OSError.

Every name a user gives reaches the file system (a corpus or model may be a path), so an empty
name would read the working directory and an over-long one would raise ENAMETOOLONG.
"""

from __future__ import annotations

import errno
from pathlib import Path

# A name longer than this is no registry, bundled or hub name, nor a path anyone types: macOS
# refuses longer paths (PATH_MAX 1024), and Linux ones are rarely half as long.
MAX_NAME_CHARS = 1024


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a model, family or corpus ("is empty", ...), or None when it can.
    A name of exactly MAX_NAME_CHARS characters can; one more cannot."""
    if not name.strip():
        return "is empty"
    if "\0" in name:
        return "holds a NUL character"
    if len(name) > MAX_NAME_CHARS:
        return f"is {len(name):,} characters long; a name or path has at most {MAX_NAME_CHARS:,}"
    return None


def shown(name: str) -> str:
    """`name` quoted for a one-line message: its first 40 characters and "..." when it is long."""
    return repr(name) if len(name) <= 60 else f"{name[:40]!r}..."


def path_exists(name: str) -> bool:
    """Whether `name` is an existing file or directory; False for a name the file system cannot
    hold (a part over its 255-byte limit) rather than an OSError."""
    try:
        return Path(name).expanduser().exists()
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False
        raise
