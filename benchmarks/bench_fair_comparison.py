"""The fair 1-rank vs N-rank comparison on CPU: 1 rank x 64 envs against 2 ranks x 32 envs, same seed.

For each world size, trains through the launcher (CPU ranks on gloo), then reads, averaged over the last
``--last`` iterations:

- the library's own reward (rsl_rl's ``Mean reward:``, rank 0's window of its last 100 episodes), and
- the ``all-ranks episode return`` (the mean over the episodes that ended on every rank in an iteration);

and finally plays both final checkpoints with ``mgpu-lab play`` on the same envs and seed. Prints the numbers per
seed, then each measure's mean over the seeds on both sides with its standard error, and whether the two sides
agree within noise (their difference under twice the standard error of the difference). Asserts nothing (the
skill's fair-comparison recipe quotes what to expect). rsl_rl only prints its number on the
console; for rl_games and skrl the library column reads n/a (their number is in TensorBoard).

    uv run python benchmarks/bench_fair_comparison.py [--rl_library rsl_rl] [--max_iterations 20] [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _bench import LAUNCHER, REPO, free_port

PLAY = REPO / "scripts" / "reinforcement_learning" / "play.py"
OWN = re.compile(r"Mean reward:\s+(-?[0-9.]+)")
ALL_RANKS = re.compile(r"\[INFO\] iteration \d+: all-ranks episode return (-?[0-9.]+)")
CHECKPOINT = re.compile(r"^\[INFO\] checkpoint: (\S+)$", re.M)
SUMMARY = re.compile(r"\[INFO\] return over \d+ episodes: mean (-?[0-9.]+), std ([0-9.]+)")


def _env() -> dict[str, str]:
    return {**os.environ, "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}


def _tail_mean(values: list[str], last: int) -> float | None:
    numbers = [float(v) for v in values[-last:]]
    return statistics.fmean(numbers) if numbers else None


def train(
    library: str, ranks: int, total_envs: int, seed: int, iterations: int, log_root: Path, last: int
) -> tuple[float | None, float | None, str]:
    """(library's own reward, all-ranks return, final checkpoint) of one run."""
    cmd = [
        sys.executable,
        str(LAUNCHER),
        "--num_gpus",
        str(ranks),
        "--device",
        "cpu",
        "--rl_library",
        library,
        "--num_envs",
        str(total_envs // ranks),
        "--max_iterations",
        str(iterations),
        "--seed",
        str(seed),
        "--master_port",
        str(free_port()),
        "--log_root",
        str(log_root),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), text=True, capture_output=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    checkpoint = CHECKPOINT.findall(proc.stdout)[-1]
    return _tail_mean(OWN.findall(proc.stdout), last), _tail_mean(ALL_RANKS.findall(proc.stdout), last), checkpoint


def evaluate(library: str, checkpoint: str, envs: int, episodes: int) -> tuple[float, float]:
    cmd = [
        sys.executable,
        str(PLAY),
        "--rl_library",
        library,
        "--device",
        "cpu",
        "--checkpoint",
        checkpoint,
        "--num_envs",
        str(envs),
        "--num_episodes",
        str(episodes),
        "--seed",
        "0",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), text=True, capture_output=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"play failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    mean, std = SUMMARY.findall(proc.stdout)[0]
    return float(mean), float(std)


def _shown(value: float | None) -> str:
    return f"{value:8.2f}" if value is not None else "     n/a"


def _mean_and_error(values: list[float]) -> tuple[float, float]:
    """Mean over the seeds and its standard error (0 for a single seed)."""
    error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return statistics.fmean(values), error


def summary(name: str, one: list[float], many: list[float], ranks: int) -> str:
    """One measure over the seeds: both sides' means with standard errors, and whether they agree."""
    if not one or not many:
        return f"{name:18s} n/a"
    (m1, e1), (mn, en) = _mean_and_error(one), _mean_and_error(many)
    noise = (e1 * e1 + en * en) ** 0.5
    verdict = "agree within noise" if abs(m1 - mn) <= 2 * noise else "differ"
    return (
        f"{name:18s} 1 rank {m1:7.2f} +- {e1:5.2f}   {ranks} ranks {mn:7.2f} +- {en:5.2f}   "
        f"difference {m1 - mn:+7.2f} (2 x its error {2 * noise:5.2f}): {verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rl_library", default="rsl_rl", choices=["rsl_rl", "rl_games", "skrl"])
    parser.add_argument("--total_envs", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=2, help="the N of the N-rank run (default: 2)")
    parser.add_argument("--max_iterations", type=int, default=20)
    parser.add_argument("--last", type=int, default=5, help="iterations averaged at the end (default: 5)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--play_envs", type=int, default=256)
    parser.add_argument("--play_episodes", type=int, default=256)
    args = parser.parse_args()
    print(
        f"{args.rl_library}, {args.total_envs} envs in total, {args.max_iterations} iterations; "
        f"rewards averaged over the last {args.last} iterations; play: {args.play_episodes} episodes on "
        f"{args.play_envs} envs, seed 0"
    )
    print("seed  ranks x envs   library's own   all-ranks return   play mean (std)")
    measures: dict[int, dict[str, list[float]]] = {r: {"own": [], "all": [], "play": []} for r in (1, args.ranks)}
    with tempfile.TemporaryDirectory(prefix="mgpu_fair_") as tmp:
        for seed in args.seeds:
            for ranks in (1, args.ranks):
                log_root = Path(tmp) / f"seed{seed}_ranks{ranks}"
                own, everyone, checkpoint = train(
                    args.rl_library, ranks, args.total_envs, seed, args.max_iterations, log_root, args.last
                )
                mean, std = evaluate(args.rl_library, checkpoint, args.play_envs, args.play_episodes)
                for key, value in (("own", own), ("all", everyone), ("play", mean)):
                    if value is not None:
                        measures[ranks][key].append(value)
                print(
                    f"{seed:4d}  {ranks:5d} x {args.total_envs // ranks:<4d}      {_shown(own)}"
                    f"           {_shown(everyone)}   {mean:8.2f} ({std:.2f})",
                    flush=True,
                )
    print(f"over {len(args.seeds)} seed(s), mean +- standard error:")
    for key, name in (("own", "library's own"), ("all", "all-ranks return"), ("play", "play mean")):
        print(summary(name, measures[1][key], measures[args.ranks][key], args.ranks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
