"""The one versioned codec for every record a job keeps: heartbeats and failures in the supervision folder, and
in the run folder the timing lines, ``run.json``, the run lock, and the records the ranks leave in the job's store
(stdlib only, no torch).

A record is one JSON object: the version of its kind (field :data:`VERSION_FIELD`) and its fields. Writer and
reader use the same :class:`Codec`, which holds the one schema of the kind (each field's check, which ones may be
missing) and the versions it reads:

- its own version (:attr:`Codec.version`), fields checked one by one; fields a newer writer added are ignored;
- older versions it still reads (:attr:`Codec.older`), each with its conversion to the current fields (``--continue_run``,
  ``mgpu-lab timing`` and ``stacks`` read folders written before). A record with no version field is version 0
  where the kind was once written without one (:attr:`Codec.unversioned`), else refused;
- any other version (a newer writer's, whose fields may mean something else) is refused by :class:`OtherVersion`,
  whose message names the record's version and the ones this reader takes.

Whatever cannot be used raises :class:`Unreadable` with a few words saying why; the caller names the file.
"""

from __future__ import annotations

import enum
import json
import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

    Check = Callable[[object], object]

#: The field of every record that holds its kind's version.
VERSION_FIELD = "v"
#: Linux's largest process id (``/proc/sys/kernel/pid_max`` is at most this).
PID_MAX = 1 << 22


class Unreadable(ValueError):
    """A record the reader cannot use; the message says why, in a few words."""


class OtherVersion(Unreadable):
    """A record of a version this reader does not take (a newer writer's, or one too old)."""

    def __init__(self, message: str, version: object) -> None:
        super().__init__(message)
        self.version = version


# --- field checks: each returns the value as read, or raises Unreadable ---------------------------------------


def integer(value: object) -> int:
    if type(value) is not int:  # bool is no count
        raise Unreadable(f"{value!r} is not an integer")
    return value


def count(value: object) -> int:
    if integer(value) < 0:
        raise Unreadable(f"{value!r} is negative")
    return integer(value)


def pid(value: object) -> int:
    """A process id: 0 and negative ids signal process groups, never a rank's or a launcher's."""
    if not 0 < integer(value) <= PID_MAX:
        raise Unreadable(f"{value!r} is not a process id")
    return integer(value)


def text(value: object) -> str:
    if not isinstance(value, str):
        raise Unreadable(f"{value!r} is not a string")
    return value


def number(value: object) -> float:
    if type(value) not in (int, float):
        raise Unreadable(f"{value!r} is not a number")
    return float(value)  # type: ignore[arg-type]


def finite(value: object) -> float:
    if not math.isfinite(number(value)):
        raise Unreadable(f"{value!r} is not a finite number")
    return number(value)


def seconds(value: object) -> float:
    """A duration or a time stamp: a finite number, not negative."""
    if finite(value) < 0:
        raise Unreadable(f"{value!r} is negative")
    return finite(value)


def optional(check: Check) -> Check:
    """``check``, or None."""

    def either(value: object) -> object:
        return None if value is None else check(value)

    return either


def one_of(kind: type[enum.StrEnum]) -> Check:
    """A member of a string enumeration, by its value."""

    def member(value: object) -> object:
        try:
            return kind(value) if isinstance(value, str) else kind("\0")
        except ValueError:
            raise Unreadable(f"{value!r} is not one of {', '.join(k.value for k in kind)}") from None

    return member


# --- the codec ---------------------------------------------------------------------------------------------------


def _same(values: dict[str, object]) -> dict[str, object]:
    return values


class Codec:
    """One kind of record: ``name`` (for messages), the ``version`` written, ``fields`` (name -> check, in the order
    written), ``build`` (the record from its checked fields, by keyword), the fields that may be ``missing`` (the
    record's default applies), the ``older`` versions still read (version -> conversion of its fields to this
    version's; None: the same fields), whether a record without a version is version 0 (``unversioned``), and who
    reads (``reader``, for messages)."""

    def __init__(
        self,
        name: str,
        version: int,
        fields: Mapping[str, Check],
        build: Callable[..., Any],
        *,
        missing: Iterable[str] = (),
        older: Mapping[int, Callable[[dict[str, object]], dict[str, object]] | None] | None = None,
        unversioned: bool = False,
        reader: str = "mgpu-lab",
    ) -> None:
        self.name, self.version, self.fields, self.build = name, version, dict(fields), build
        self.missing = frozenset(missing)
        self.older = {v: convert or _same for v, convert in (older or {}).items()}
        self.unversioned, self.reader = unversioned, reader

    def readable(self) -> str:
        """The versions this reader takes, in words."""
        versions = sorted({self.version, *self.older})
        if len(versions) == 1:
            return f"version {versions[0]}"
        if versions == list(range(versions[0], versions[-1] + 1)):
            return f"versions {versions[0]} to {versions[-1]}"
        return "versions " + ", ".join(str(v) for v in versions)

    def encode(self, record: object, *, indent: int | None = None) -> bytes:
        """The record (an object with the fields as attributes, or a mapping of them) as one JSON object with this
        kind's version."""
        get = record.get if isinstance(record, dict) else lambda name: getattr(record, name)
        body = {VERSION_FIELD: self.version, **{name: get(name) for name in self.fields}}
        return json.dumps(body, indent=indent).encode("utf-8")

    def decode(self, data: bytes | str) -> Any:
        """The record in ``data``; :class:`Unreadable` (:class:`OtherVersion` for a version not read) saying why."""
        if not data.strip():
            raise Unreadable("empty")
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            raise Unreadable("not JSON: truncated or garbage") from None
        if not isinstance(obj, dict):
            raise Unreadable(f"a JSON {type(obj).__name__}, not an object")
        return self.build(**self._values(self._current(obj)))

    def _current(self, obj: dict[str, object]) -> dict[str, object]:
        """The record's fields as this version has them (older versions converted), or OtherVersion."""
        version = obj.get(VERSION_FIELD, 0 if self.unversioned else None)
        if VERSION_FIELD in obj and type(version) is not int:  # damaged, not another version
            raise Unreadable(f"field {VERSION_FIELD!r}: {version!r} is not a version number")
        if version == self.version:
            return obj
        if type(version) is int and version in self.older:
            return self.older[version](obj)
        if version is None:
            said = "no version"
        elif self.unversioned and version == 0 and VERSION_FIELD not in obj:
            said = "no version (written before records carried one)"
        else:
            said = f"version {version!r}"
        newer = type(version) is int and version > self.version
        raise OtherVersion(
            f"{said}; this {self.reader} reads {self.readable()} (field {VERSION_FIELD!r})"
            + (f": a newer {self.reader} wrote it" if newer else ""),
            version,
        )

    def _values(self, obj: dict[str, object]) -> dict[str, object]:
        values: dict[str, object] = {}
        for name, check in self.fields.items():
            if name not in obj:
                if name in self.missing:
                    continue
                raise Unreadable(f"field {name!r} missing")
            try:
                values[name] = check(obj[name])
            except Unreadable as exc:
                raise Unreadable(f"field {name!r}: {exc}") from None
        return values
