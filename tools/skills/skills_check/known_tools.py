"""The options of the tools this checker knows but never reads from an installed environment: torchrun
(``python -m torch.distributed.run``) and skrl's JAX launcher (``python -m skrl.utils.distributed.jax``).

Their argparse specs are kept beside the checker in ``known_tools.json`` (read statically from the
installed torch and skrl when it was written, with the versions it was read from), so a check gives the
same findings with and without a ``.venv``, and never reads outside the checked root.
``tests/test_checker_known_tools.py`` compares the file with the installed torch and skrl; to refresh
it after an upgrade:

    uv run --frozen python -m skills_check.known_tools --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .model import ArgSpec

HERE = Path(__file__).resolve().parent
SPEC_FILE = HERE / "known_tools.json"
# tool -> (package, its argparse module inside the package, helper modules the parser reads)
SOURCES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "torchrun": ("torch", "distributed/run.py", ("distributed/argparse_util.py",)),
    "jax": ("skrl", "utils/distributed/jax/launcher.py", ()),
}


def load() -> dict[str, ArgSpec]:
    """The kept specs by tool ("torchrun", "jax"); empty when the file is missing or unreadable."""
    from .caches.codec import CodecError, decode

    try:
        data = json.loads(SPEC_FILE.read_text(encoding="utf-8"))
        return {tool: decode(entry["spec"]) for tool, entry in data["tools"].items()}
    except (OSError, ValueError, KeyError, TypeError, CodecError):
        return {}


def from_installed(root: Path) -> dict[str, tuple[str, ArgSpec]]:
    """(version, spec) per tool, read statically from the torch and skrl installed for ``root``."""
    from importlib import metadata

    from .inputs import read_installed
    from .parsers.argspec import find_installed, parse_argparse

    out: dict[str, tuple[str, ArgSpec]] = {}
    for tool, (package, relpath, helpers) in SOURCES.items():
        path = find_installed(root, package, relpath)
        text = read_installed(path) if path is not None else None
        if path is None or text is None:
            continue
        helper_texts = [t for t in (read_installed(path.parents[relpath.count("/")] / h) for h in helpers) if t]
        spec = parse_argparse(f"{package}/{relpath}", text, helper_texts)
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "unknown"
        out[tool] = (version, spec)
    return out


def render(found: dict[str, tuple[str, ArgSpec]]) -> str:
    from .caches.codec import encode

    tools = {
        tool: {"package": SOURCES[tool][0], "version": version, "spec": encode(spec)}
        for tool, (version, spec) in sorted(found.items())
    }
    return json.dumps({"tools": tools}, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    found = from_installed(HERE.parents[2])
    missing = sorted(set(SOURCES) - set(found))
    if missing:
        print(
            f"error: not installed here: {', '.join(SOURCES[m][0] for m in missing)} (run `uv sync --all-extras`)",
            file=sys.stderr,
        )
        return 2
    text = render(found)
    if "--write" in argv:
        SPEC_FILE.write_text(text, encoding="utf-8")
        print(f"{SPEC_FILE}: written")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # python -m skills_check.known_tools [--write]
    sys.exit(main(sys.argv[1:]))
