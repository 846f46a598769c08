"""Cost of the rank-side supervision per collective, as a ratio to the bare collective (never asserted in tests).

Two gloo ranks on this machine (``torch.multiprocessing``), each timing, alternately in rounds:

1. ``all_reduce`` of a small tensor (the worst case: the collective itself is cheapest), bare vs with the
   :class:`mgpu_lab.health.collectives.CollectiveTracker` installed and the rank entry's heartbeat thread
   running (beats written to a temp folder, timing windows closed every second);
2. one DDP training step (forward, backward with the gradient all-reduce, optimizer step), bare vs tracked
   (the tracked model gets the comm hook the tracker adds).

``--no_beats`` leaves the heartbeat thread out (the tracker alone). Prints the median per-call time of each and the ratio tracked / bare (target: close to 1.0x for the DDP step;
the small all_reduce shows the fixed cost per call).

Usage: ``uv run python benchmarks/bench_collectives.py [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from _bench import free_port


def timed(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def ddp_step(model, optimizer, x):
    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    return step


def worker(rank: int, port: int, calls: int, rounds: int, folder: str, out, beats: bool) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mgpu_lab.health.collectives import CollectiveTracker
    from mgpu_lab.health.rank_entry import Beater
    from mgpu_lab.health.rank_progress import Supervision
    from mgpu_lab.health.timing import TimingLog

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones(256)
    net = lambda: torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
    x = torch.randn(128, 64)
    bare_model = DistributedDataParallel(net())
    bare_step = ddp_step(bare_model, torch.optim.SGD(bare_model.parameters(), lr=1e-3), x)
    results: dict[str, list[float]] = {
        "all_reduce bare": [],
        "all_reduce tracked": [],
        "DDP step bare": [],
        "DDP step tracked": [],
    }
    tracker = CollectiveTracker()
    beater = None
    tracked_step = None
    for round_ in range(rounds):
        for tracked in (False, True) if round_ % 2 == 0 else (True, False):  # alternate the order: no bias
            if tracked and beater is None:
                tracker.install()
                beater = Beater(Supervision(folder, rank, rank, 2), tracker, TimingLog(tracker, rank, "bench", folder))
                if beats:
                    beater.thread.start()
                tracked_model = DistributedDataParallel(net())
                tracked_step = ddp_step(tracked_model, torch.optim.SGD(tracked_model.parameters(), lr=1e-3), x)
            elif tracked:
                tracker.install()
            dist.barrier()
            kind = "tracked" if tracked else "bare"
            results[f"all_reduce {kind}"].append(timed(lambda: dist.all_reduce(t), calls))
            results[f"DDP step {kind}"].append(timed(tracked_step if tracked else bare_step, max(calls // 10, 1)))
            if tracked:
                tracker.uninstall()  # the bare runs see torch.distributed untouched
    if beats:
        beater.finish(ok=True)
    dist.destroy_process_group()
    out.put((rank, {k: statistics.median(v) for k, v in results.items()}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing of all_reduce (default: 2000)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, each order alternating (default: 10)")
    parser.add_argument("--no_beats", action="store_true", help="the tracker alone, without the heartbeat thread")
    args = parser.parse_args()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="bench_collectives_") as folder:
        procs = [
            ctx.Process(
                target=worker, args=(r, free_port_once, args.calls, args.rounds, folder, queue, not args.no_beats)
            )
            for free_port_once in [free_port()]
            for r in (0, 1)
        ]
        for p in procs:
            p.start()
        found = dict(queue.get(timeout=1800) for _ in procs)
        for p in procs:
            p.join(timeout=60)
    for rank, med in sorted(found.items()):
        for what in ("all_reduce", "DDP step"):
            bare, tracked = med[f"{what} bare"], med[f"{what} tracked"]
            print(
                f"rank {rank}: {what:<10} bare {bare * 1e6:9.1f} us  tracked {tracked * 1e6:9.1f} us  "
                f"ratio {tracked / bare:5.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
