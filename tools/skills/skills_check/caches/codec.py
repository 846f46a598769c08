"""The model's objects as plain values, and back, in two forms.

- ``encode``/``decode``: the parse cache's JSON form, fields by name (a file written by another version of
  the checker is refused field by field rather than misread).
- ``pack``/``unpack``: a positional form for ``marshal`` (fields in declaration order, a class by its index
  in ``CLASSES``), about three times faster to unpack; for values that never outlive the checker that made
  them (a worker process's parses sent over a pipe, ``loader/prefetch.py``).

Only the model's dataclasses (from a fixed table), the sentinel ``MISSING`` and plain data (str, int,
float, bool, None, list, dict, tuple, set, bytes; dates in the JSON form) are encoded; decoding builds
nothing else, so encoded data cannot carry code. Anything else raises ``CodecError``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
from collections.abc import Callable
from typing import Any

from ..model import (
    MISSING,
    ArgSpec,
    Cell,
    Code,
    Comment,
    Finding,
    Fix,
    Heading,
    Include,
    Link,
    Loc,
    MarkdownDoc,
    Option,
    RstDoc,
    Skill,
    Table,
    TextEdit,
)

CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ArgSpec,
        Cell,
        Code,
        Comment,
        Finding,
        Fix,
        Heading,
        Include,
        Link,
        Loc,
        MarkdownDoc,
        Option,
        RstDoc,
        Skill,
        Table,
        TextEdit,
    )
}
TAG = "$"
_ORDER = tuple(CLASSES.values())  # pack's class indexes
_INDEX = {cls: i for i, cls in enumerate(_ORDER)}
_FIELDS = tuple(tuple(f.name for f in dataclasses.fields(cls)) for cls in _ORDER)
# each class's field values as one tuple, read in one call (pack's hot path)
_VALUES = tuple(
    operator.attrgetter(*names) if len(names) > 1 else (lambda v, n=names[0]: (getattr(v, n),)) for names in _FIELDS
)
# pack's tags for what is not a model class (a class's tag is its index, from 0)
_MISSING, _TUPLE, _SET, _FROZENSET = -1, -2, -3, -4


class CodecError(ValueError):
    """A value the cache format cannot hold, or a cache entry that is not one of ours."""


def encode(value: Any) -> Any:
    """``value`` as a JSON-ready structure (tagged objects for everything JSON lacks)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {TAG: "int", "v": str(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if value is MISSING:
        return {TAG: "MISSING"}
    if isinstance(value, dict):
        return {TAG: "dict", "v": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {TAG: "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {TAG: type(value).__name__, "v": [encode(v) for v in value]}
    if isinstance(value, bytes):
        return {TAG: "bytes", "v": value.hex()}
    dates = sys.modules.get("datetime")  # a date or time value means its module is loaded: never imported here
    if dates is not None and isinstance(value, dates.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if dates is not None and isinstance(value, dates.date):
        return {TAG: "date", "v": value.isoformat()}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and CLASSES.get(name) is type(value):
        return {TAG: name, "v": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    raise CodecError(f"cannot cache a {name}")


def decode(data: Any) -> Any:
    """The inverse of ``encode``; anything that is not an encoding of ours raises ``CodecError``."""
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict) or not isinstance(data.get(TAG), str):
        raise CodecError("not a cache value")
    tag, v = data[TAG], data.get("v")
    if tag == "MISSING":
        return MISSING
    if tag == "int":
        return int(str(v)[:64])
    if tag == "float":
        return float(str(v))
    if tag == "dict":
        out = {}
        for pair in _list(v):
            key, value = _list(pair)
            key = decode(key)
            if isinstance(key, (list, dict, set)):
                raise CodecError("unhashable key")
            out[key] = decode(value)
        return out
    if tag == "tuple":
        return tuple(decode(x) for x in _list(v))
    if tag in ("set", "frozenset"):
        items = [decode(x) for x in _list(v)]
        return set(items) if tag == "set" else frozenset(items)
    if tag == "bytes":
        return bytes.fromhex(str(v))
    if tag in ("datetime", "date"):
        import datetime  # only for a cached date (frontmatter rarely holds one): a cold start skips its import

        return (datetime.datetime if tag == "datetime" else datetime.date).fromisoformat(str(v))
    cls = CLASSES.get(tag)
    if cls is None or not isinstance(v, dict):
        raise CodecError(f"unknown cache tag {tag!r}")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    if not set(v) <= names:
        raise CodecError(f"unknown fields for {tag}")
    return cls(**{k: decode(x) for k, x in v.items()})


_LEAVES = frozenset({str, int, bool, float, bytes, type(None)})  # what pack and unpack pass through as it is


def pack(value: Any) -> Any:
    """``value`` as nested str, int, float, bool, None, bytes, list, dict and tagged tuples (``marshal``
    writes them): a model object is ``(class index, field, ...)``, a tuple ``(-2, item, ...)``. (Leaves are
    passed through where they are met rather than in a call each: most of a model's values are leaves.)"""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is list:
        return [v if type(v) in _LEAVES else pack(v) for v in value]
    if kind is dict:
        return {pack(k): v if type(v) in _LEAVES else pack(v) for k, v in value.items()}
    index = _INDEX.get(kind)
    if index is not None:
        return (index, *[v if type(v) in _LEAVES else pack(v) for v in _VALUES[index](value)])
    if kind is tuple:
        return (_TUPLE, *[v if type(v) in _LEAVES else pack(v) for v in value])
    if value is MISSING:
        return (_MISSING,)
    if kind is set or kind is frozenset:
        return (_SET if kind is set else _FROZENSET, *[pack(v) for v in value])
    raise CodecError(f"cannot pack a {kind.__name__}")


def unpack(data: Any) -> Any:
    """The inverse of ``pack``; a tag it does not know raises ``CodecError``."""
    kind = type(data)
    if kind is list:
        return [v if type(v) in _LEAVES else unpack(v) for v in data]
    if kind is tuple:
        tag = data[0] if data else None
        if type(tag) is not int or not _FROZENSET <= tag < len(_ORDER):
            raise CodecError("not a packed value")
        if tag >= 0:
            return _ORDER[tag](*[v if type(v) in _LEAVES else unpack(v) for v in data[1:]])
        if tag == _MISSING:
            return MISSING
        items = [unpack(v) for v in data[1:]]
        return tuple(items) if tag == _TUPLE else set(items) if tag == _SET else frozenset(items)
    if kind is dict:
        return {unpack(k): v if type(v) in _LEAVES else unpack(v) for k, v in data.items()}
    return data


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise CodecError("expected a list")
    return v


def conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded ``value`` has the shape the type ``hint`` says (a model dataclass, checked field by
    field, or plain data in lists, tuples, dicts and sets); ``Any`` takes anything. A cache entry that does not
    conform is one of another shape (planted, damaged or from another version): the caller re-parses."""
    return _checker(hint)(value)


Check = Callable[[Any], bool]
_CHECKERS: dict[Any, Check] = {}


def _checker(hint: Any) -> Check:
    """The test ``conforms`` applies for ``hint``, built once per hint (a cache hit validates tens of thousands of
    values: reading the hint's origin and arguments each time was a third of a warm start's check)."""
    try:
        return _CHECKERS[hint]
    except KeyError:
        pass
    except TypeError:  # an unhashable hint: built each time
        return _build(hint)
    check = _CHECKERS[hint] = _build(hint)
    return check


def _build(hint: Any) -> Check:
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value: True
    if hint is None or hint is type(None):
        return lambda value: value is None
    if origin in (typing.Union, types.UnionType):
        alternatives = [_checker(a) for a in args]
        return lambda value: any(c(value) for c in alternatives)
    if origin in (list, set, frozenset):
        item = _checker(args[0] if args else Any)
        return lambda value: isinstance(value, origin) and all(item(v) for v in value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            each = _checker(args[0])
            return lambda value: isinstance(value, tuple) and all(each(v) for v in value)
        if not args:
            return lambda value: isinstance(value, tuple)
        places = [_checker(a) for a in args]
        return lambda value: (
            isinstance(value, tuple) and len(value) == len(places) and all(c(v) for c, v in zip(places, value))
        )
    if origin is dict:
        key, item = _checker(args[0]), _checker(args[1])
        return lambda value: isinstance(value, dict) and all(key(k) and item(v) for k, v in value.items())
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        # the fields' checkers are looked up when a value is checked, not built here: a dataclass may hold itself
        fields = [(n, h) for n, h in typing.get_type_hints(hint).items() if not n.startswith("_")]

        def dataclass_value(value: Any) -> bool:
            return type(value) is hint and all(_checker(h)(getattr(value, n)) for n, h in fields)

        return dataclass_value
    if hint is float:
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return lambda value: isinstance(value, hint)
    return lambda value: True  # a hint this check does not know (a TypeVar, a Literal): not refused here
