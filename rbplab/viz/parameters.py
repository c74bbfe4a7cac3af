"""Notebook parameters as batch runs hand them over, made into the values the notebooks expect.

`papermill -p corpora '["prose","humaneval"]'` passes the text, not a list; `-p corpora prose`
one name; `-y` and `rbplab report --params FILE.yaml` real YAML values. The `as_*` functions
accept all of these (a list, a JSON or YAML list in text, comma-separated names, one name) and
raise a one-line `ParameterError` for anything else, so a batch fails with a sentence instead of
a corpus lookup of '["prose", ...]'. `NotebookParameters` reads a whole parameter cell with them
and opens the study it names, the one opening every analysis notebook shares. `read_params_file`
and `check_names` serve `rbplab report`.

papermill's `-p` types only True, False, None and numbers: `-p extract false` hands over the text
'false', which Python takes as true. `typed_parameters`, called right after each notebook's
parameters cell, types every flag and number that cell declares (by its annotation, as
`papermill --help-notebook` shows it) in place: true/false, yes/no, 1/0 in any case for a bool,
numeric text for an int or a float, and a one-line `ParameterError` naming the parameter, its
value and the type expected for anything else.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rbplab.core.documents import parse_yaml, read_yaml
from rbplab.core.errors import BadFileError, RbplabError, did_you_mean

if TYPE_CHECKING:
    from rbplab.grid import Grid
    from rbplab.study import Study
    from rbplab.study.training import Training


class ParameterError(RbplabError, ValueError):
    """A notebook parameter that cannot be used as given."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows an exception with this method as the lines it returns: in a kernel (the lab,
        # papermill, the report) a wrong parameter is its one-line message, not ~30 lines of frames.
        return [f"{type(self).__name__}: {self}"]


# A parameters file names a few values: a few KB. The bound keeps /dev/zero or a huge file out.
MAX_PARAMS_FILE_BYTES = 1 << 20


def _parsed(text: str, name: str) -> Any:
    try:
        return parse_yaml(text, "the value")
    except BadFileError as err:
        raise ParameterError(f"parameter {name!r}: cannot read {text!r} ({err})") from None


def as_names(value: Any, name: str = "value") -> list[str] | None:
    """None, or a list of names from a list, a JSON/YAML list in text ('["a", "b"]'), comma-separated
    text ("a,b") or one name ("a")."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _parsed(text, name)
        elif text.lower() in ("none", "null", ""):
            return None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise ParameterError(
        f'parameter {name!r} must be a list of names, e.g. ["prose", "humaneval"]; got {value!r}'
    )


def as_numbers(value: Any, name: str = "value", kind: type = int) -> list | None:
    """None, or a list of numbers (`kind`) from a list, list text ("[1, 10]") or "1,10"."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("none", "null", ""):
            return None
        value = _parsed(text if text.startswith("[") else f"[{text}]", name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        if kind is int and any(float(v) != int(v) for v in value):
            raise ParameterError(f"parameter {name!r} must hold whole numbers; got {value!r}")
        return [kind(v) for v in value]
    raise ParameterError(f"parameter {name!r} must be a list of numbers, e.g. [1, 10, 100]; got {value!r}")


_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
_NONE = frozenset({"none", "null", ""})


def as_flag(value: Any, name: str = "value") -> bool:
    """A bool from a bool, 1 or 0, or the text true/false, yes/no, 1/0 in any case (papermill's
    `-p extract false` hands over the text 'false', which Python would take as true)."""
    __tracebackhide__ = True  # a notebook shows the one-line error, not this frame
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
    raise ParameterError(f"parameter {name!r} is {value!r}, not a bool (true/false, yes/no or 1/0)")


def as_number(value: Any, name: str = "value", kind: type = int) -> int | float:
    """An int (`kind` int) or a float (`kind` float) from a number or numeric text; an int must be
    whole, either finite."""
    __tracebackhide__ = True
    what = "an int (a whole number)" if kind is int else "a float (a number)"
    number: Any = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise ParameterError(f"parameter {name!r} is {value!r}, not {what}")
    if kind is int:
        if isinstance(number, float) and not number.is_integer():
            raise ParameterError(f"parameter {name!r} is {value!r}, not {what}")
        return int(number)
    return float(number)


def _scalar_reader(hint: Any) -> Callable[[Any, str], Any] | None:
    """The reader of a parameter annotated `hint` when it is bool, int or float, or Optional of one
    (None, or the text none/null, stays None); None for any other annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(rest) != 1:
            return None
        hint, optional = rest[0], True
    names = {"bool": bool, "int": int, "float": float}  # annotations kept as text
    hint = names.get(hint, hint) if isinstance(hint, str) else hint
    if hint is bool:
        reader: Callable[[Any, str], Any] = as_flag
    elif hint in (int, float):
        kind = hint

        def reader(value: Any, name: str) -> Any:
            __tracebackhide__ = True
            return as_number(value, name, kind)

    else:
        return None
    if not optional:
        return reader

    def maybe(value: Any, name: str) -> Any:
        __tracebackhide__ = True
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
            return None
        return reader(value, name)

    return maybe


def typed_parameters(namespace: MutableMapping[str, Any]) -> None:
    """Type in place every parameter of a notebook's parameters cell that is annotated bool, int or
    float (or Optional of one), reading the annotations in `namespace` (the notebook's
    ``globals()``) after papermill's injected cell: `as_flag` and `as_number`. Later cells read the
    typed values; a value of another type is a one-line `ParameterError`. Other parameters are left
    to `NotebookParameters.read`."""
    __tracebackhide__ = True  # IPython then shows the notebook's line and the one-line error
    annotations = namespace.get("__annotations__")
    for name, hint in (annotations or {}).items():
        reader = _scalar_reader(hint)
        if reader is not None and name in namespace:
            namespace[name] = reader(namespace[name], name)


def as_mapping(value: Any, name: str = "value") -> dict:
    """A dict from a dict, YAML/JSON mapping text ("{max_tokens: 2000}") or None (empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = _parsed(value, name) if value.strip() else {}
        value = {} if value is None else value
    if isinstance(value, Mapping):
        return dict(value)
    raise ParameterError(f"parameter {name!r} must be a mapping, e.g. {{max_tokens: 2000}}; got {value!r}")


def read_params_file(path: str | Path) -> dict[str, Any]:
    """The parameters of a YAML (or JSON) file: one mapping of parameter name to value."""
    path = Path(path)
    try:
        data = read_yaml(path, "parameters file", MAX_PARAMS_FILE_BYTES)
    except FileNotFoundError:
        raise ParameterError(f"cannot read parameters file {path}: it does not exist") from None
    except OSError as err:
        raise ParameterError(f"cannot read parameters file {path}: {err.strerror or err}") from None
    except BadFileError as err:
        raise ParameterError(str(err)) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ParameterError(f"{path} must hold one mapping of parameter names to values")
    return dict(data)


def check_names(parameters: Iterable[str], declared: Iterable[str]) -> None:
    """Refuse parameters no notebook declares, naming the closest declared ones."""
    known = sorted(set(declared))
    unknown = [p for p in parameters if p not in known]
    if unknown:
        first = unknown[0]
        raise ParameterError(
            f"no notebook takes parameter {first!r}{did_you_mean(first, known)}"
            + (f" (nor {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else "")
            + f"; parameters: {', '.join(known)}"
        )


def _floats(value: Any, name: str) -> list[float] | None:
    return as_numbers(value, name, kind=float)


def _table(value: Any, name: str) -> dict | None:
    return as_mapping(value, name) or None


# How each list or table parameter a notebook may declare is read from what a batch run hands over;
# any other parameter (flags, paths, counts) arrives as its own value.
_READERS: dict[str, Callable[[Any, str], Any]] = {
    "families": as_names,
    "models": as_names,
    "corpora": as_names,
    "settings": as_mapping,
    "checkpoints": _table,
    "ks": as_numbers,
    "ns": as_numbers,
    "holdouts": as_numbers,
    "large_fractions": _floats,
    "synthetic": as_flag,
    "extract": as_flag,
}


@dataclass(frozen=True)
class NotebookParameters:
    """The parameter cell of an analysis notebook, read as values: the study it names (families,
    models, corpora, settings, or a study_file; or synthetic), where and how to read it, and the
    list parameters the notebooks' analyses take. A parameter the notebook does not declare keeps
    its default here.

    Examples
    --------
    >>> p = NotebookParameters.read({"families": "micro", "corpora": '["prose", "humaneval"]', "ks": "1,10"})
    >>> p.families, p.corpora, p.ks, p.settings
    (['micro'], ['prose', 'humaneval'], [1, 10], {})
    """

    families: list[str] | None = None
    models: list[str] | None = None
    corpora: list[str] | None = None
    settings: dict = field(default_factory=dict)
    study_file: str | None = None
    checkpoints: dict | None = None
    synthetic: bool = False
    cache_dir: str | None = None
    extract: bool = False
    ties: str = "pessimistic"
    ks: list[int] | None = None
    ns: list[int] | None = None
    holdouts: list[int] | None = None
    large_fractions: list[float] | None = None

    @classmethod
    def read(cls, namespace: Mapping[str, Any]) -> NotebookParameters:
        """The parameters among `namespace` (a notebook's ``globals()``, after papermill's injected
        cell), lists and tables given as text read as such; a value that cannot be read is a
        one-line `ParameterError` naming the parameter."""
        values = {}
        for parameter in fields(cls):
            if parameter.name in namespace:
                value = namespace[parameter.name]
                reader = _READERS.get(parameter.name)
                values[parameter.name] = reader(value, parameter.name) if reader else value
        return cls(**values)

    def grid(self) -> Grid:
        """The grid these parameters name: the study file's, else families (or their `models`)
        on `corpora` (default: every bundled corpus) with `settings`."""
        from rbplab.grid import Grid

        if self.study_file:
            return Grid.read(self.study_file)
        if not self.families:
            raise ParameterError(
                "parameter 'families' names no family; give one, e.g. [\"micro\"], or a study_file"
            )
        return Grid.from_names(self.families, self.corpora, self.settings, models=self.models)

    def open_study(self) -> Study:
        """The study these parameters name: made-up models when `synthetic`
        (`rbplab.study.synthetic_study`), else the grid's runs from the cache (`load_study`), a
        study file's listed as the file lists its models."""
        from rbplab.study import load_study, synthetic_study

        if self.synthetic:
            return synthetic_study(ties=self.ties)
        return load_study(
            self.grid(),
            cache_dir=self.cache_dir,
            ties=self.ties,
            extract=self.extract,
            outer="model" if self.study_file else "corpus",
        )

    def open_training(self, checkpoints: str | Path | Mapping[str, Any] | None = None) -> Training:
        """The checkpoints of `rbplab.study.training.open_training`: `checkpoints` (a study file or
        its table; default: the `checkpoints` parameter, else `study_file`) at `ks`, or the synthetic
        fallback sized like `families`' models."""
        from rbplab.study.training import open_training

        return open_training(
            checkpoints or self.checkpoints or self.study_file,
            *([] if self.ks is None else [self.ks]),
            families=self.families or [],
            synthetic=self.synthetic,
            cache_dir=self.cache_dir,
            ties=self.ties,
            extract=self.extract,
        )
