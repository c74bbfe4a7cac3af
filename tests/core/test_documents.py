"""The one bounded reader of JSON, TOML and YAML (`rbplab.core.documents`): regular files only,
a byte bound checked before reading, a nesting bound checked without recursion, declared shapes
refused in one line naming the file and the field."""

from __future__ import annotations

import random
import re

import pytest
from helpers.hostile import hostile_file, no_hang

from rbplab.core.documents import (
    Fields,
    ListOf,
    MapOf,
    bracket_depth,
    parse_json,
    parse_toml,
    parse_yaml,
    read_json,
    read_toml,
    read_yaml,
)
from rbplab.core.errors import BadFileError, MissingFileError

DEEP = 100_000


def counted_depth(text: bytes) -> int:
    """The deepest nesting, counted bracket by bracket (the depth never goes below zero)."""
    depth = deepest = 0
    for byte in text:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth = max(depth - 1, 0)
    return deepest


@pytest.mark.parametrize("seed", range(20))
def test_bracket_depth_equals_a_count_bracket_by_bracket(seed):
    rng = random.Random(seed)
    text = bytes(rng.choice(b"[]{}x") for _ in range(rng.randrange(1, 5000)))
    assert bracket_depth(text) == counted_depth(text)


def test_bracket_depth_across_chunks_and_stray_closers():
    text = b"]" * 10 + b"[" * 3_000_000 + b"]" * 2_999_990 + b"{" * 7
    assert bracket_depth(text) == 3_000_000
    assert bracket_depth(b"]]]]][[[]][[") == 3 == counted_depth(b"]]]]][[[]][[")


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_json, "[" * DEEP + "]" * DEEP),
        (parse_json, '{"a": ' * DEEP + "1" + "}" * DEEP),
        (parse_toml, "a = " + "[" * DEEP + "]" * DEEP),
        (parse_toml, "a = " + "{b = " * DEEP + "1" + "}" * DEEP),
        (parse_toml, "a." * DEEP + "b = 1"),  # dotted keys nest without a bracket
        (parse_yaml, "a: " + "[" * DEEP + "]" * DEEP),
        (parse_yaml, "".join("  " * i + "a:\n" for i in range(200))),  # block nesting by indentation
    ],
)
def test_deep_nesting_is_refused_without_recursion(parse, text):
    with pytest.raises(BadFileError, match=r"^doc is nested more than 64 levels deep"):
        parse(text, "doc")


def test_brackets_inside_strings_and_comments_do_not_count():
    deep = "[" * 1000
    assert parse_json(f'{{"a": "{deep}\\"{deep}"}}', "doc") == {"a": f'{deep}"{deep}'}
    assert parse_toml(f'a = "{deep}"\n# {deep}\nb = \'{deep}\'\nc = """\n{deep}"""\n', "doc")["b"] == deep
    assert parse_yaml(f'a: "{deep}"\n# {deep}\n', "doc") == {"a": deep}
    assert parse_json("[" * 64 + "]" * 64, "doc") is not None  # the bound itself is taken


def test_a_yaml_alias_is_refused():
    with pytest.raises(BadFileError, match=r"uses a YAML alias \(\*x\)"):
        parse_yaml("a: &x [1, 2]\nb: *x\n", "doc")


SHAPE = Fields(
    {"grid": dict, "versions": MapOf((str, type(None))), "rows": ListOf(ListOf(float)), "n": int},
    required=("grid",),
)


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("[1]", "doc holds a list, expected an object"),
        ('{"versions": {}}', "doc: field 'grid' is missing"),
        ('{"grid": []}', "doc: field 'grid' is a list, expected an object"),
        ('{"grid": {}, "versions": "x"}', "doc: field 'versions' is a string, expected an object"),
        (
            '{"grid": {}, "versions": {"a": 1}}',
            "doc: field 'versions.a' is an integer, expected a string or null",
        ),
        ('{"grid": {}, "rows": [[1.5, "x"]]}', r"doc: field 'rows[0][1]' is a string, expected a number"),
        ('{"grid": {}, "n": true}', "doc: field 'n' is true or false, expected an integer"),
        ('{"grid": {}, "n": 1.5}', "doc: field 'n' is a number, expected an integer"),
    ],
)
def test_a_field_of_the_wrong_type_is_named(text, told):
    with pytest.raises(BadFileError) as err:
        parse_json(text, "doc", shape=SHAPE)
    assert str(err.value) == told


def test_the_declared_shape_takes_what_it_declares():
    value = {"grid": {"x": [1]}, "versions": {"a": "1", "b": None}, "rows": [[1, 2.5]], "n": 3, "other": []}
    assert parse_json(str(value).replace("'", '"').replace("None", "null"), "doc", shape=SHAPE) == value


@pytest.mark.parametrize("read", [read_json, read_toml, read_yaml])
@pytest.mark.parametrize(
    ("how", "told"),
    [
        ("/dev/zero", "is a character device, not a regular file"),
        ("fifo", "is a FIFO, not a regular file"),
        ("sparse", r"is larger than 1 MiB \(2,147,483,648 bytes\)"),
        ("folder", "is a directory, not a regular file"),
    ],
)
def test_only_a_bounded_regular_file_is_read(read, how, told, tmp_path):
    path = hostile_file(tmp_path / "file", how)
    with no_hang(20), pytest.raises(BadFileError, match=rf"^results file {path} {told}$"):
        read(path, "results file", 1 << 20)


@pytest.mark.parametrize(
    ("read", "text"),
    [(read_json, '{"a": {"b": [1]}}'), (read_toml, "a = {b = [1]}"), (read_yaml, "a: {b: [1]}")],
)
def test_a_reader_takes_its_parsers_options(read, text, tmp_path):
    path = tmp_path / "doc"
    path.write_text(text)
    # Three levels deep: the bound of 3 takes it, 2 refuses it, naming the file.
    assert read(path, "doc", 1 << 10, max_depth=3, shape=Fields({"a": dict})) == {"a": {"b": [1]}}
    with pytest.raises(BadFileError, match=rf"^doc {re.escape(str(path))} is nested more than 2 levels deep"):
        read(path, "doc", 1 << 10, max_depth=2)
    with pytest.raises(
        BadFileError, match=rf"^doc {re.escape(str(path))}: field 'a' is an object, expected a list$"
    ):
        read(path, "doc", 1 << 10, shape=Fields({"a": list}))


def test_a_missing_file_and_bad_text(tmp_path):
    with pytest.raises(MissingFileError, match="^study file .*nope.toml not found$"):
        read_toml(tmp_path / "nope.toml", "study file", 1 << 20)
    (tmp_path / "bin.toml").write_bytes(b"a = 1\n\x89")
    with pytest.raises(BadFileError, match=r"not a UTF-8 text file \(byte 6 is b'\\x89'\)"):
        read_toml(tmp_path / "bin.toml", "study file", 1 << 20)
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(BadFileError, match=r"^results file .*bad.json is not JSON \(Expecting"):
        read_json(tmp_path / "bad.json", "results file", 1 << 20)
