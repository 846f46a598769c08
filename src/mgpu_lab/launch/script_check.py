"""Whether a ``--train_script`` / ``-m`` target can start, decided before any rank does (torch-free, nothing run).

A script file must exist, be a regular file (never opened otherwise: a FIFO would block), hold Python (not an
ELF or other binary) and compile (``compile()``, never run): a syntax error is refused as ``syntax error at
train.py:2: ...``. A module must be found the way the ranks' ``python -m`` finds it, without importing it or its
parent packages: the top-level name through the import system's finders (``find_spec`` of a top-level name
runs no package code), each submodule by searching its parent package's folders for the file
(:class:`importlib.machinery.PathFinder`, which reads folders only). A package that extends its own
``__path__`` at import time cannot be searched that way: its submodules are left to the ranks. A name inside a
plain module (``-m os.path``: ``os`` is no package, but importing it puts ``os.path`` in ``sys.modules``) is what
``python -m`` finds with :func:`importlib.util.find_spec` once the parent is imported: that is asked of a child
interpreter with the ranks' environment and working folder (the parent's import runs there, never in the
launcher; the module named is found, never run), within :data:`FIND_SPEC_TIMEOUT_S`.

What only a rank can find (an import inside the script, a failure at run time) ends in the launcher's report.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import stat
import sys

from mgpu_lab.core.errors import UsageError
from mgpu_lab.core.safe_read import kind_of, read_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: a script larger than this is not compiled here (the ranks will): reading it whole would cost the launcher
MAX_COMPILE_BYTES = 32 * 1024 * 1024
#: how long the child interpreter may take to import a plain module's parent and find the name (past it, the ranks
#: will say whether it runs)
FIND_SPEC_TIMEOUT_S = 20.0
#: the child's code, what ``python -m NAME`` does before it runs anything (runpy): import NAME's parent, find NAME's
#: spec with ``importlib.util.find_spec``, get its code (compiled, never run); a package's ``__main__`` is searched
#: in its folders. Exit 0 when there is something to run, 1 when not, 2 for a package without ``__main__``.
_FIND_SPEC = """
import importlib.machinery, importlib.util, sys
name = sys.argv[1]
try:
    __import__(name.rpartition(".")[0])
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        sys.exit(1)
    if spec.submodule_search_locations is not None:
        main = importlib.machinery.PathFinder.find_spec(name + ".__main__", list(spec.submodule_search_locations))
        sys.exit(0 if main is not None else 2)
    sys.exit(0 if spec.loader.get_code(name) is not None else 1)
except Exception:
    sys.exit(1)
"""
_ELF = b"\x7fELF"
_ZIP = b"PK\x03\x04"  # python runs a zip archive's __main__.py


def _compile(source: bytes, path: str, shown: str, flag: str) -> None:
    """Compile without running; a syntax error is refused with its place."""
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"{shown}:{exc.lineno}" if exc.lineno else shown
        what = (exc.msg or "invalid syntax").splitlines()[0]
        hint = "" if path.endswith(".py") else " (is it a Python script?)"
        raise UsageError(f"{flag}: syntax error at {where}: {what}{hint}") from None
    except (ValueError, MemoryError, RecursionError) as exc:  # NUL bytes; sources too deep for the compiler
        raise UsageError(f"{flag}: cannot be compiled as Python ({str(exc).splitlines()[0][:120]})") from None


def script_file(path: str, flag: str) -> None:
    """Refuse a script file that cannot start (one line naming ``flag`` and the reason)."""
    shown = os.path.basename(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{flag}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{flag}: {kind_of(st.st_mode)}, not a Python script file")
    try:
        head, _ = read_regular(path, 4)
        if head == _ELF:
            raise UsageError(f"{flag}: an executable binary (ELF), not a Python script; run it without the launcher")
        if head == _ZIP or head == importlib.util.MAGIC_NUMBER or st.st_size > MAX_COMPILE_BYTES:
            return  # a zip archive or compiled bytecode runs as is; a huge file is left to the ranks
        source, _ = read_regular(path, MAX_COMPILE_BYTES)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot be read ({exc.strerror or exc})") from None
    if b"\0" in source:
        raise UsageError(f"{flag}: binary data (NUL bytes), not a Python script")
    _compile(source, path, shown, flag)


def search_path(environ: Mapping[str, str], cwd: str) -> list[str]:
    """Where a rank's ``python -m`` looks: its working folder, the forwarded PYTHONPATH, then this interpreter's
    own path (site-packages and ``.pth`` entries; not this process's script folder)."""
    forwarded = [p or cwd for p in environ.get("PYTHONPATH", "").split(os.pathsep) if environ.get("PYTHONPATH")]
    return [cwd, *forwarded, *sys.path[1:]]


def _find_top(name: str, path: Sequence[str]) -> importlib.machinery.ModuleSpec | None:
    """A top-level module's spec: the builtin, frozen and installed finders (editable installs' finders
    included), then the path search over ``path``. Nothing is imported."""
    if name in sys.builtin_module_names:
        return importlib.machinery.BuiltinImporter.find_spec(name)
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(name, None)
        except Exception:  # noqa: BLE001 - a third-party finder's own failure says nothing about the module
            spec = None
        if spec is not None:
            return spec
    return importlib.machinery.PathFinder.find_spec(name, list(path))


def _extends_path(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether a package's ``__init__`` may change its ``__path__`` (then its folders are not the whole story)."""
    origin = spec.origin
    if origin is None or origin == "namespace":
        return False  # a namespace package: its folders are all there is
    if not origin.endswith(".py") or not os.path.isfile(origin):
        return True  # compiled or generated: cannot tell without running it
    try:
        return b"__path__" in read_regular(origin, MAX_COMPILE_BYTES)[0]
    except OSError:
        return True


def found_by_python(name: str, environ: Mapping[str, str], cwd: str) -> bool | None:
    """Whether ``python -m NAME`` finds a module to run, as a rank's interpreter would: ``importlib.util.find_spec``
    in a child with the ranks' environment and folder (importing NAME's parents, never NAME). None: no answer
    within :data:`FIND_SPEC_TIMEOUT_S` (the ranks will tell)."""
    import subprocess  # only for a name inside a plain module: kept off the launcher's start-up

    try:
        done = subprocess.run(
            [sys.executable, "-c", _FIND_SPEC, name],
            cwd=cwd,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=FIND_SPEC_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    except OSError:
        return False
    return done.returncode == 0


def module(name: str, environ: Mapping[str, str], cwd: str | None = None) -> None:
    """Refuse ``-m NAME`` when NAME (or a parent package, or a package's ``__main__``) cannot be found."""
    cwd = os.getcwd() if cwd is None else cwd
    parts = name.split(".")
    spec = _find_top(parts[0], search_path(environ, cwd))
    if spec is None:
        raise UsageError(
            f"-m {name}: no module named {parts[0]!r} on the ranks' path (working folder, PYTHONPATH, installed packages)"
        )
    for i, part in enumerate([*parts[1:], "__main__"], start=1):
        locations = spec.submodule_search_locations
        if locations is None:
            if part == "__main__":
                break  # a plain module: it runs as __main__
            if found_by_python(name, environ, cwd) is not False:  # its import may add the name (os: os.path)
                return
            raise UsageError(
                f"-m {name}: {'.'.join(parts[:i])} is a module, not a package; {'.'.join(parts[i:])!r} cannot be in it "
                "(nor does importing it add one)"
            )
        if _extends_path(spec):
            return  # its __path__ is decided when it runs: the ranks will say
        full = ".".join([*parts[:i], part])
        found = importlib.machinery.PathFinder.find_spec(full, list(locations))
        if found is None:
            if part == "__main__":
                raise UsageError(f"-m {name}: a package without __main__.py; name the module to run inside it")
            raise UsageError(f"-m {name}: no module named {full!r} (searched {', '.join(locations)})")
        spec = found
    if spec.origin and spec.origin.endswith(".py"):
        script_file(spec.origin, f"-m {name}")


def preflight(target: str, is_module: bool, given: str | None, environ: Mapping[str, str]) -> None:
    """The launcher's check of its foreign script: ``target`` a path (``given`` as typed) or a module name."""
    if is_module:
        module(target, environ)
    else:
        script_file(target, f"--train_script {given or target}")
