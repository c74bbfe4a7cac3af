"""The bounded readers at their edges: a file of exactly its bound and one byte more, a file that
grows while it is read, a nesting of exactly `MAX_DEPTH` and one more (brackets, and TOML's dotted
keys, which nest without one), and the depth the refusal reports. Each case is the limit, one
under or one over, so a guard moved by one fails a row."""

from __future__ import annotations

import os

import pytest

from rbplab.core import documents
from rbplab.core.documents import MAX_DEPTH, parse_json, parse_toml, read_bytes, read_json
from rbplab.core.errors import BadFileError
from rbplab.store.files import UnsafeFileError, read_entry_file

BOUND = 100  # bytes: small, so the edge cases are cheap


def _growing_fstat(monkeypatch, path, extra: int) -> None:
    """Make `path` grow by `extra` bytes right after the reader's fstat of it: the size the
    reader checked is stale by the time it reads."""
    real = os.fstat
    target = os.stat(path).st_ino

    def fstat(fd):
        info = real(fd)
        if info.st_ino == target and extra:
            with open(path, "ab") as handle:
                handle.write(b"x" * extra)
        return info

    monkeypatch.setattr(os, "fstat", fstat)


@pytest.mark.parametrize(("size", "refused"), [(BOUND - 1, False), (BOUND, False), (BOUND + 1, True)])
def test_read_bytes_takes_a_file_of_its_bound_and_refuses_one_byte_more(tmp_path, size, refused):
    path = tmp_path / "doc"
    path.write_bytes(b"x" * size)
    if refused:
        # The size check, not the read that would catch it later: the message says which.
        told = rf"^doc file {path} is larger than 100 bytes \({size} bytes\)$"
        with pytest.raises(BadFileError, match=told):
            read_bytes(path, "doc file", BOUND)
    else:
        assert read_bytes(path, "doc file", BOUND) == b"x" * size


@pytest.mark.parametrize(
    ("size", "grows", "refused"),
    [
        (BOUND - 1, 1, False),  # grows to exactly the bound: read whole
        (BOUND, 1, True),  # grows to one byte over
        (BOUND - 1, 2, True),
        (BOUND - 10, 5, False),
    ],
)
def test_read_bytes_catches_a_file_that_grows_past_its_bound(tmp_path, monkeypatch, size, grows, refused):
    path = tmp_path / "doc"
    path.write_bytes(b"x" * size)
    _growing_fstat(monkeypatch, path, grows)
    if refused:
        told = rf"^doc file {path} grew larger than 100 bytes while being read$"
        with pytest.raises(BadFileError, match=told):
            read_bytes(path, "doc file", BOUND)
    else:
        assert read_bytes(path, "doc file", BOUND) == b"x" * (size + grows)


def _entry_file(tmp_path, size: int):
    entry = tmp_path / "cache" / "ab" / "abcdef"
    entry.mkdir(parents=True)
    path = entry / "manifest.json"
    path.write_bytes(b"y" * size)
    return path, entry


@pytest.mark.parametrize(("size", "refused"), [(BOUND - 1, False), (BOUND, False), (BOUND + 1, True)])
def test_a_cache_file_of_its_bound_is_read_and_one_byte_more_refused(tmp_path, size, refused):
    path, entry = _entry_file(tmp_path, size)
    if refused:
        told = rf"^manifest\.json holds {size} bytes, more than the 100 it can$"
        with pytest.raises(UnsafeFileError, match=told):
            read_entry_file(path, entry, BOUND)
    else:
        assert read_entry_file(path, entry, BOUND) == b"y" * size


@pytest.mark.parametrize(
    ("size", "grows", "refused"),
    [
        (BOUND - 1, 1, False),
        (BOUND, 1, True),
        (BOUND, 50, True),
        (BOUND - 1, 0, False),
        (BOUND - 1, 2, True),  # from under the bound to one over: not cut at the size first seen
        (BOUND - 10, 5, False),  # grows within the bound: read as it now is, not cut
    ],
)
def test_a_cache_file_that_grows_past_its_bound_while_read_is_refused(
    tmp_path, monkeypatch, size, grows, refused
):
    path, entry = _entry_file(tmp_path, size)
    _growing_fstat(monkeypatch, path, grows)
    if refused:
        told = r"^manifest\.json grew beyond the 100 bytes it can hold while being read$"
        with pytest.raises(UnsafeFileError, match=told):
            read_entry_file(path, entry, BOUND)
    else:
        assert read_entry_file(path, entry, BOUND) == b"y" * size + b"x" * grows


def _json_nested(depth: int) -> str:
    """A JSON document `depth` levels deep, lists and objects alternating."""
    opened = "".join('{"a": ' if level % 2 else "[" for level in range(depth))
    closed = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opened + "1" + closed


def test_the_json_nesting_helper_nests_as_asked():
    # The helper's depth, counted by walking the parsed value (independent of the bracket counter).
    value, depth = parse_json(_json_nested(10), "doc", max_depth=1000), 0
    while isinstance(value, (list, dict)):
        value, depth = (value[0] if isinstance(value, list) else value["a"]), depth + 1
    assert depth == 10


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 7])
def test_json_nesting_at_the_bound_is_taken_and_the_depth_beyond_it_reported(depth):
    text = _json_nested(depth)
    if depth <= MAX_DEPTH:
        assert parse_json(text, "doc") is not None
    else:
        told = rf"^doc is nested more than {MAX_DEPTH} levels deep \(at least {depth}\)$"
        with pytest.raises(BadFileError, match=told):
            parse_json(text, "doc")


def test_a_json_file_nested_one_level_too_deep_is_refused_with_its_name(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(_json_nested(MAX_DEPTH + 1))
    told = rf"^results file {path} is nested more than 64 levels deep \(at least 65\)$"
    with pytest.raises(BadFileError, match=told):
        read_json(path, "results file", 1 << 20)
    path.write_text(_json_nested(MAX_DEPTH))
    assert read_json(path, "results file", 1 << 20) is not None


def _dotted(parts: int) -> str:
    return ".".join(f"k{i}" for i in range(parts)) + " = 1\n"


def _toml_depth(value) -> int:
    """Tables nested in `value`, the root table counted."""
    depth = 0
    while isinstance(value, dict):
        value, depth = next(iter(value.values())), depth + 1
    return depth


@pytest.mark.parametrize("parts", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 9])
def test_a_toml_dotted_key_at_the_bound_is_taken_and_one_part_more_refused(parts, monkeypatch):
    text = _dotted(parts)
    if parts <= MAX_DEPTH:
        # A key of n parts is n tables deep, the root one included: as deep as n JSON brackets.
        assert _toml_depth(parse_toml(text, "doc")) == parts
        return
    import tomllib

    def never(*args, **kwargs):
        raise AssertionError("the parser saw a key too deep for it (it keeps every prefix of a key)")

    # Refused before the parser runs, and the message counts the key's parts.
    monkeypatch.setattr(tomllib, "loads", never)
    told = rf"^doc is nested more than {MAX_DEPTH} levels deep \(at least {parts}\)$"
    with pytest.raises(BadFileError, match=told):
        parse_toml(text, "doc")


@pytest.mark.parametrize(("outer", "inner", "refused"), [(33, 31, False), (33, 32, True), (40, 40, True)])
def test_dotted_keys_and_brackets_together_count_to_the_bound(outer, inner, refused):
    """Dotted keys inside an inline table: no run of dots reaches the bound, so only the depth of
    the parsed value (walked after parsing) sees `outer + inner` levels."""
    inline = ".".join(f"i{i}" for i in range(inner))
    text = ".".join(f"o{i}" for i in range(outer)) + f" = {{{inline} = 1}}\n"
    depth = outer + inner
    if refused:
        told = rf"^doc is nested more than {MAX_DEPTH} levels deep \(at least {MAX_DEPTH + 1}\)$"
        with pytest.raises(BadFileError, match=told):
            parse_toml(text, "doc")
    else:
        assert _toml_depth(parse_toml(text, "doc")) == depth == MAX_DEPTH


def test_the_depth_bound_is_the_one_documented():
    # The edge cases above are written against 64: a change of the bound is a change of them too.
    assert documents.MAX_DEPTH == 64


@pytest.mark.parametrize("text", [b"", b"]", b"[]", b"[][]", b"[[]]", b"{}[]{}", b"[{]}", b"]][", b"[[[]]]"])
def test_bracket_depth_of_a_few_brackets_is_counted_not_assumed(text):
    # Few openers take a shortcut past the running count: each must still be the depth.
    depth = deepest = 0
    for byte in text:
        depth = depth + 1 if byte in b"[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    assert documents.bracket_depth(text) == deepest
