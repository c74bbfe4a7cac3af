"""The one reader of every JSON, TOML and YAML document rbplab is handed: study files, results
files, `--params`, configs, safetensors headers and indexes, and every JSON file of the cache.

Nothing in such a file can bring rbplab down or make it wait:

- `read_bytes` opens a file without blocking (a FIFO cannot hang it) and takes a regular file only
  (`/dev/zero`, a device, a folder are refused before a byte is read); it refuses a file larger
  than the bound of its kind from its size, and reads at most one byte more than the bound, so a
  file that grows meanwhile is caught too.
- The nesting depth is checked without recursion before the parser, which recurses, sees the text:
  for JSON and TOML the brackets outside strings (and TOML comments) are counted; for YAML the
  parser's event stream, which needs no recursion, is. A structure deeper than `MAX_DEPTH` is
  refused (Python's parsers die of RecursionError near a thousand levels).
- A declared shape (`Fields`, `ListOf`, `MapOf` or plain types) says what each field must be; a
  field of another type is refused in one line naming the file and the field.

Every refusal is a `BadFileError` (a ValueError: callers that turn "not JSON" into their own
error go on doing so), a missing file a `MissingFileError`; other OSErrors (permission, I/O) pass
through.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from rbplab.core.errors import BadFileError, MissingFileError

# The deepest structure any file rbplab reads needs (a results file, a tokenizer config) is under
# ten levels; Python's parsers recurse once per level and fail near a thousand.
MAX_DEPTH = 64

_P = ParamSpec("_P")
_T = TypeVar("_T")

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
}


def file_kind(mode: int) -> str:
    """What an `st_mode` describes, in words ("a FIFO", "a symbolic link", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


# -- shapes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fields:
    """A JSON object (TOML table, YAML mapping) whose named fields, where present, have the types
    given; the `required` ones must be present. Fields not named are not checked."""

    types: Mapping[str, Expected]
    required: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ListOf:
    """A list whose every item is `item`."""

    item: Expected


@dataclass(frozen=True)
class MapOf:
    """An object of any keys whose every value is `value`."""

    value: Expected


# A plain type, one of the classes above, or a tuple of them meaning "any one of these".
Expected = type | Fields | ListOf | MapOf | tuple

_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def _container(expected: Expected) -> type:
    if isinstance(expected, (Fields, MapOf)):
        return dict
    return list if isinstance(expected, ListOf) else expected  # type: ignore[return-value]


def _matches(value: Any, kind: type) -> bool:
    if isinstance(value, bool) and kind is not bool:  # JSON true is no number
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _described(value: Any) -> str:
    for kind, name in _NAMES.items():
        if _matches(value, kind) and kind is not float:
            return name
    return _NAMES[float] if isinstance(value, float) else f"a {type(value).__name__}"


def _where(source: str, path: str) -> str:
    return f"{source}: field {path!r} is" if path else f"{source} holds"


def shape_problem(value: Any, expected: Expected, source: str, path: str = "") -> str | None:
    """Why `value` (found at field `path` of `source`) is not `expected`, in one line; None when
    it is. Recurses along the shape (a few levels, written here), never along the data."""
    alternatives = expected if isinstance(expected, tuple) else (expected,)
    chosen = next((a for a in alternatives if _matches(value, _container(a))), None)
    if chosen is None:
        wanted = " or ".join(
            dict.fromkeys(_NAMES.get(_container(a), _container(a).__name__) for a in alternatives)
        )
        return f"{_where(source, path)} {_described(value)}, expected {wanted}"
    if isinstance(chosen, Fields):
        for name in chosen.required:
            if name not in value:
                return f"{source}: field {_join(path, name)!r} is missing"
        for name, kind in chosen.types.items():
            if name in value:
                problem = shape_problem(value[name], kind, source, _join(path, name))
                if problem:
                    return problem
    elif isinstance(chosen, MapOf):
        for name, item in value.items():
            problem = shape_problem(item, chosen.value, source, _join(path, str(name)))
            if problem:
                return problem
    elif isinstance(chosen, ListOf):
        for i, item in enumerate(value):
            problem = shape_problem(item, chosen.item, source, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def check_shape(value: Any, expected: Expected | None, source: str) -> Any:
    """`value`, after checking it is `expected` (BadFileError naming the field otherwise)."""
    if expected is not None:
        problem = shape_problem(value, expected, source)
        if problem:
            raise BadFileError(problem)
    return value


# -- nesting --------------------------------------------------------------------------------------

_JSON_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# TOML: multi-line strings first, then one-line basic and literal strings, then comments.
_TOML_SKIPPED = re.compile(
    rb'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*', re.DOTALL
)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# What a bare TOML key is made of, and blanks: deleted, a dotted key of n parts leaves n - 1 dots
# in a row (quoted parts are gone with the strings; a number leaves at most one dot).
_KEY_PARTS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_- \t"


def bracket_depth(text: bytes) -> int:
    """The deepest nesting of [ ] and { } in `text` (strings already removed), counted without
    recursion: a closing bracket never takes the depth below zero."""
    brackets = text.translate(None, _NOT_BRACKETS)
    openers = brackets.count(b"[") + brackets.count(b"{")
    if openers <= 1:
        return openers
    deepest, depth = 0, 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    for start in range(0, codes.size, 1 << 20):  # bounded memory for a bracket-only file
        # Bit 1 is set in "[" and "{", clear in "]" and "}": +1 for an opener, -1 for a closer.
        steps = (codes[start : start + (1 << 20)] & 2).astype(np.int32) - 1
        running = depth + np.cumsum(steps, dtype=np.int64)
        lowest = np.minimum.accumulate(running)
        if lowest[-1] < 0:
            # Stray closers (malformed input) must not let later openers look shallower than the
            # parser sees them: the depth restarts from zero at each new lowest point.
            running -= np.minimum(lowest, 0)
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


def _check_depth(depth: int, max_depth: int, source: str) -> None:
    if depth > max_depth:
        raise BadFileError(f"{source} is nested more than {max_depth} levels deep (at least {depth})")


def _value_depth(value: Any, max_depth: int, source: str) -> None:
    """Refuse a parsed value deeper than `max_depth` (TOML's dotted keys nest without brackets),
    walked with a stack, never recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and depth > max_depth:
            _check_depth(depth, max_depth, source)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


# -- parsing text in memory -----------------------------------------------------------------------


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)


def parse_json(
    data: bytes | str, source: str, *, shape: Expected | None = None, max_depth: int = MAX_DEPTH
) -> Any:
    """The JSON document `data` (of `source`, named in every error): depth checked before parsing,
    shape after; BadFileError otherwise."""
    raw = _as_bytes(data)
    _check_depth(bracket_depth(_JSON_STRINGS.sub(b"", raw)), max_depth, source)
    try:
        value = json.loads(raw)
    except ValueError as err:  # also UnicodeDecodeError and an integer of too many digits
        raise BadFileError(f"{source} is not JSON ({err})") from None
    return check_shape(value, shape, source)


def _not_text(source: str, data: bytes, err: UnicodeDecodeError) -> str:
    return f"{source} is not a UTF-8 text file (byte {err.start} is {data[err.start : err.start + 1]!r})"


def parse_toml(
    data: bytes | str, source: str, *, shape: Expected | None = None, max_depth: int = MAX_DEPTH
) -> dict:
    """The TOML document `data` (of `source`): depth checked before and after parsing (dotted keys
    nest without brackets), shape after; BadFileError otherwise."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]

    raw = _as_bytes(data)
    text = _TOML_SKIPPED.sub(b"", raw)
    _check_depth(bracket_depth(text), max_depth, source)
    # tomllib keeps every prefix of a dotted key: a key of 100,000 parts takes gigabytes.
    dots = re.search(rb"\.{%d,}" % max_depth, text.translate(None, _KEY_PARTS))
    if dots is not None:
        _check_depth(len(dots.group()) + 1, max_depth, source)
    try:
        value = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise BadFileError(_not_text(source, raw, err)) from None
    except tomllib.TOMLDecodeError as err:
        raise BadFileError(f"{source} is not valid TOML ({err})") from None
    _value_depth(value, max_depth, source)
    return check_shape(value, shape, source)


def parse_yaml(
    data: bytes | str, source: str, *, shape: Expected | None = None, max_depth: int = MAX_DEPTH
) -> Any:
    """The YAML document `data` (of `source`), read with the safe loader: depth checked on the
    parser's events (no recursion) before anything is built, aliases refused (they let a few bytes
    stand for an exponential structure), shape after; BadFileError otherwise."""
    import yaml

    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                _check_depth(depth, max_depth, source)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                raise BadFileError(f"{source} uses a YAML alias (*{event.anchor}); write the value out")
        value = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 (the safe loader)
    except yaml.YAMLError as err:
        raise BadFileError(f"{source} is not valid YAML ({' '.join(str(err).split())})") from None
    except UnicodeDecodeError as err:
        raise BadFileError(_not_text(source, bytes(data), err)) from None  # type: ignore[arg-type]
    return check_shape(value, shape, source)


# -- reading files --------------------------------------------------------------------------------


def _amount(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size:,} bytes"


def read_bytes(path: str | Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the file `path` (a `what`: "results file", "study file", ...), which must be a
    regular file of at most `max_bytes` bytes. Opened without blocking and checked with fstat
    before a byte is read; MissingFileError when absent, BadFileError when refused."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MissingFileError(f"{what} {path} not found") from None
    except IsADirectoryError:
        raise BadFileError(f"{what} {path} is a directory, not a regular file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadFileError(f"{what} {path} is {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise BadFileError(f"{what} {path} is larger than {_amount(max_bytes)} ({info.st_size:,} bytes)")
        data = read_up_to(fd, max_bytes + 1)  # one byte more than the bound: a file that grows is caught
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise BadFileError(f"{what} {path} grew larger than {_amount(max_bytes)} while being read")
    return data


def read_up_to(fd: int, limit: int) -> bytes:
    """At most `limit` bytes from the open file `fd`, fewer at its end (the one bounded read loop
    of the package: `read_bytes` here and the cache's `rbplab.store.files`)."""
    chunks, total = [], 0
    while total < limit:
        chunk = os.read(fd, min(limit - total, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _file_reader(
    parse: Callable[Concatenate[bytes, str, _P], _T],
) -> Callable[Concatenate[str | Path, str, int, _P], _T]:
    """`parse` as a reader of files: `read_bytes(path, what, max_bytes)`, then `parse` with the file
    named in its errors ("results file x.json") and `parse`'s own options (`shape`, `max_depth`)."""

    def read(path: str | Path, what: str, max_bytes: int, *args: _P.args, **options: _P.kwargs) -> _T:
        return parse(read_bytes(path, what, max_bytes), f"{what} {path}", *args, **options)

    read.__name__ = read.__qualname__ = parse.__name__.replace("parse_", "read_")
    read.__doc__ = f"The file `path` (a `what`), read by `read_bytes` and parsed by `{parse.__name__}`."
    return read


read_json = _file_reader(parse_json)
read_toml = _file_reader(parse_toml)
read_yaml = _file_reader(parse_yaml)
