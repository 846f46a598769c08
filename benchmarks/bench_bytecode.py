"""What compiled bytecode saves each process the suite starts: the CPU time of importing torch and an RL library
with the installed ``.pyc`` files, against the same imports compiled from source, in one run (prints figures and
the ratio; never asserted in tests).

From source: ``PYTHONPYCACHEPREFIX`` names an empty temporary folder and ``PYTHONDONTWRITEBYTECODE`` is set, so
Python finds no ``.pyc`` file and writes none, as in an environment that sets that variable over a venv installed
without ``--compile-bytecode``. Compiled: the venv's own ``__pycache__`` files (``uv sync --compile-bytecode``
writes them; ``.ci/run`` installs so). Each figure is the median of ``--repeat`` fresh processes, the two kinds
interleaved so that load on a shared machine hits both alike.

    uv sync --compile-bytecode && uv run --frozen python benchmarks/bench_bytecode.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

IMPORTS = {
    "torch": "import torch",
    "rsl_rl rank": "import torch, rsl_rl.runners",
    "rl_games rank": "import torch, rl_games.torch_runner",
}


def cpu_seconds(code: str, env: dict[str, str]) -> float:
    """User plus system CPU seconds of one fresh ``python -c code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="processes per figure (default: 3)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    compiled = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    cpu = subprocess.run([sys.executable, "-c", "import torch"], env=compiled, capture_output=True, text=True)
    if cpu.returncode != 0:
        print(f"bench_bytecode: torch does not import here: {cpu.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench_bytecode_") as empty:
        source = {**compiled, "PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}
        print(f"{'imports':<16}{'from source':>14}{'compiled':>12}{'ratio':>8}   (median CPU-s of {args.repeat})")
        for name, code in IMPORTS.items():
            times: dict[str, list[float]] = {"source": [], "compiled": []}
            for _ in range(args.repeat):
                times["source"].append(cpu_seconds(code, source))
                times["compiled"].append(cpu_seconds(code, compiled))
            s, c = statistics.median(times["source"]), statistics.median(times["compiled"])
            print(f"{name:<16}{s:>14.2f}{c:>12.2f}{s / c:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
