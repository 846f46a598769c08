"""Cost of the rank-side supervision per collective, as a ratio to the bare collective (never asserted in tests).

Ranks on this machine (``torch.multiprocessing``), each timing, alternately in rounds:

1. ``all_reduce`` of 256 floats (the worst case: the collective itself is cheapest), bare vs with the
   :class:`mgpu_lab.health.collectives.CollectiveTracker` installed and the rank entry's heartbeat thread
   running (beats written to a temp folder, timing windows closed every second);
2. one DDP training step of a small policy network (forward, backward with the gradient all-reduce, optimizer
   step), bare vs tracked.

``--device cpu`` (default): two gloo ranks, MLP 64-256-1, a batch of 128 (as at earlier landings). ``--device
cuda``: NCCL, one rank per GPU, run with world size 1 and then with every visible GPU (when more than one), MLP
64-256-256-1, a batch of 4096 (the issue's small policy network); each timing ends with a
``torch.cuda.synchronize()``. Targets on CUDA (issue 36): DDP step ratio at most 1.03, the small all_reduce at
most 5 us over the bare one. First, in this process and without any backend, the tracker's own per-call Python work: its wrapper around a
no-op collective against the no-op (best of 7 repeats, so a loaded machine barely moves it).

``--no_beats`` leaves the heartbeat thread out (the tracker alone). Prints the
median per-call time of each, the ratio tracked / bare and the difference.

Usage: ``uv run python benchmarks/bench_collectives.py [--device cpu|cuda] [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from _bench import free_port


def timed(fn, calls: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def ddp_step(model, optimizer, x):
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).sum().backward()
        optimizer.step()

    return step


def worker(rank: int, world: int, port: int, args, folder: str, out) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mgpu_lab.health.collectives import CollectiveTracker
    from mgpu_lab.health.rank_entry import Beater
    from mgpu_lab.health.rank_progress import Supervision
    from mgpu_lab.health.timing import TimingLog

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        sync = torch.cuda.synchronize
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        sync = lambda: None
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    t = torch.ones(256, device=device)
    hidden = [torch.nn.Linear(256, 256), torch.nn.Tanh()] if cuda else []  # CPU: the earlier landings' 64-256-1
    net = lambda: torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), *hidden, torch.nn.Linear(256, 1)).to(
        device
    )
    x = torch.randn(4096 if cuda else 128, 64, device=device)
    ids = [rank] if cuda else None
    bare_model = DistributedDataParallel(net(), device_ids=ids)
    bare_step = ddp_step(bare_model, torch.optim.SGD(bare_model.parameters(), lr=1e-3), x)
    for _ in range(20):  # warm up: NCCL communicators, CUDA kernels, caching allocator
        dist.all_reduce(t)
        bare_step()
    results: dict[str, list[float]] = {
        k: [] for k in ("all_reduce bare", "all_reduce tracked", "DDP bare", "DDP tracked")
    }
    tracker = CollectiveTracker()
    beater = None
    tracked_step = None
    steps = max(args.calls // 10, 1)
    for round_ in range(args.rounds):
        for tracked in (False, True) if round_ % 2 == 0 else (True, False):  # alternate the order: no bias
            if tracked and beater is None:
                tracker.install()
                beater = Beater(Supervision(folder, rank, rank, world), tracker, TimingLog(tracker, rank, "b", folder))
                if not args.no_beats:
                    beater.thread.start()
                tracked_model = DistributedDataParallel(net(), device_ids=ids)
                tracked_step = ddp_step(tracked_model, torch.optim.SGD(tracked_model.parameters(), lr=1e-3), x)
                for _ in range(20):
                    tracked_step()
            elif tracked:
                tracker.install()
            dist.barrier()
            kind = "tracked" if tracked else "bare"
            results[f"all_reduce {kind}"].append(timed(lambda: dist.all_reduce(t), args.calls, sync))
            results[f"DDP {kind}"].append(timed(tracked_step if tracked else bare_step, steps, sync))
            if tracked:
                tracker.uninstall()  # the bare runs see torch.distributed untouched
    if beater is not None and not args.no_beats:
        beater.finish(ok=True)
    dist.destroy_process_group()
    out.put((rank, {k: statistics.median(v) for k, v in results.items()}))


def run(world: int, args) -> dict[int, dict[str, float]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench_collectives_") as folder:
        procs = [ctx.Process(target=worker, args=(r, world, port, args, folder, queue)) for r in range(world)]
        for p in procs:
            p.start()
        found = dict(queue.get(timeout=1800) for _ in procs)
        for p in procs:
            p.join(timeout=60)
    return found


def report(world: int, found: dict[int, dict[str, float]], device: str) -> None:
    for rank, med in sorted(found.items()):
        for what, label in (("all_reduce", "all_reduce 256"), ("DDP", "DDP step")):
            bare, tracked = med[f"{what} bare"], med[f"{what} tracked"]
            print(
                f"{device} world {world} rank {rank}: {label:<14} bare {bare * 1e6:9.1f} us  tracked "
                f"{tracked * 1e6:9.1f} us  ratio {tracked / bare:5.3f}x  over {(tracked - bare) * 1e6:+7.1f} us"
            )


def per_call_work(device: str) -> None:
    """The wrapper's Python work per call, on a tensor of ``device`` (CUDA: with the timing events it samples)."""
    import timeit

    import torch

    from mgpu_lab.health.collectives import CollectiveTracker

    tracker = CollectiveTracker()
    tracker._cuda_possible = device == "cuda"
    noop = lambda tensor, op=None, group=None, async_op=False: None  # the collective's signature
    wrapped = tracker._wrap("all_reduce", noop)
    t = torch.ones(256, device=device)
    n = 20000 if device == "cuda" else 200000
    bare = min(timeit.repeat(lambda: noop(t), number=n, repeat=7)) / n
    tracked = min(timeit.repeat(lambda: wrapped(t), number=n, repeat=7)) / n
    print(f"{device} tracker per call: {(tracked - bare) * 1e9:.0f} ns of Python work (wrapper around a no-op)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="gloo on CPU, or NCCL on the GPUs")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing of all_reduce (default: 2000)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, each order alternating (default: 10)")
    parser.add_argument("--no_beats", action="store_true", help="the tracker alone, without the heartbeat thread")
    args = parser.parse_args()
    per_call_work(args.device)
    if args.device == "cpu":
        report(2, run(2, args), "cpu")
        return 0
    import torch

    gpus = torch.cuda.device_count()
    if gpus < 1:
        print("bench_collectives: --device cuda: no CUDA device visible", file=sys.stderr)
        return 2
    for world in sorted({1, gpus}):
        report(world, run(world, args), "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
