"""What leaving without the module teardown saves a rank: train.py's own exit against ``sys.exit``.

Runs ``train.py`` (one process, CPU, each library in turn) as it ends now, through :mod:`mgpu_lab.core.leave`,
and the same run ended by ``sys.exit`` (a ``-c`` bootstrap that loads the script under another name and calls its
``main``), interleaved, and prints the least CPU seconds of each and their ratio. Every rank of a launcher job and
every ``mgpu-lab train`` and ``mgpu-lab play`` pays the difference once. Not a test.

    uv run python benchmarks/bench_leave.py [--repeat 3] [--rl_library rsl_rl,rl_games,skrl]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from _bench import REPO, timed_process

TRAIN = REPO / "scripts" / "reinforcement_learning" / "train.py"
#: the script's main, ended as Python ends a script (the baseline)
PLAIN_EXIT = (
    "import importlib.util, sys; "
    f"spec = importlib.util.spec_from_file_location('train_script', {str(TRAIN)!r}); "
    "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
    "sys.argv[0] = spec.origin; sys.exit(module.main())"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each form per library (the least counts)")
    parser.add_argument("--rl_library", default="rsl_rl,rl_games,skrl", help="comma-separated libraries")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    for library in args.rl_library.split(","):
        best = {"leave": float("inf"), "sys.exit": float("inf")}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as logs:
                train = ["--rl_library", library, "--device", "cpu", "--num_envs", "8", "--max_iterations", "2"]
                train += ["--log_root", logs]
                for form, head in (("leave", [str(TRAIN)]), ("sys.exit", ["-c", PLAIN_EXIT])):
                    _, cpu, code = timed_process([sys.executable, *head, *train], env, cwd=REPO)
                    if code != 0:
                        print(f"{library}: the {form} run exited {code}", file=sys.stderr)
                        return 1
                    best[form] = min(best[form], cpu)
        print(
            f"{library}: leave {best['leave']:.2f} CPU-s, sys.exit {best['sys.exit']:.2f} CPU-s: "
            f"{best['sys.exit'] - best['leave']:.2f} CPU-s saved a process "
            f"(sys.exit / leave {best['sys.exit'] / best['leave']:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
