"""The parse cache's format: the model's objects as plain JSON values, and back.

Only the model's dataclasses (by name, from a fixed table), the sentinel ``MISSING`` and plain data
(str, int, float, bool, None, list, dict, tuple, set, bytes, dates) are encoded; decoding builds
nothing else, so a cache file cannot carry code. Anything else raises ``CodecError`` (not cached).
"""

from __future__ import annotations

import dataclasses
import math
import sys
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
        Table,
        TextEdit,
    )
}
TAG = "$"


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


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise CodecError("expected a list")
    return v


_HINTS: dict[type, dict[str, Any]] = {}


def conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded ``value`` has the shape the type ``hint`` says (a model dataclass, checked field by
    field, or plain data in lists, tuples, dicts and sets); ``Any`` takes anything. A cache entry that does not
    conform is one of another shape (planted, damaged or from another version): the caller re-parses."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin in (list, set, frozenset):
        return isinstance(value, origin) and all(conforms(v, args[0] if args else Any) for v in value)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return not args or (len(args) == len(value) and all(conforms(v, a) for v, a in zip(value, args)))
    if origin is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if type(value) is not hint:
            return False
        if hint not in _HINTS:
            _HINTS[hint] = typing.get_type_hints(hint)
        return all(conforms(getattr(value, name), h) for name, h in _HINTS[hint].items() if not name.startswith("_"))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this check does not know (a TypeVar, a Literal): not refused here
