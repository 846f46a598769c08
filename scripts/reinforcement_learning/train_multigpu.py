#!/usr/bin/env python3
"""Launch ``train.py`` on several GPUs or nodes through torchrun (or skrl's JAX launcher).

Run it as ``uv run mgpu-lab train_multigpu [LAUNCHER OPTIONS] [TRAINING ARGS]``. The launcher's own
options are listed by ``--help``; every other argument is checked against ``train.py``'s parser and
passed to it unchanged, and ``--distributed`` is added once.

This script holds the one argparse definition (:func:`build_parser`, read statically by the checker) and
its epilog; everything after parsing (validation, config, command, runner) is :mod:`mgpu_lab.launch.launcher`.
Import-light on purpose: ``--dry_run`` and every rejection answer without importing torch.
"""

from __future__ import annotations

import argparse
import os
import sys

# Make the runtime package importable when the script runs from a plain checkout (as train.py does).
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "src")
if os.path.isdir(_SRC) and _SRC not in sys.path:
    sys.path.insert(0, _SRC)

from mgpu_lab.core.help_format import OneLineErrors, RawHelpFormatter
from mgpu_lab.launch.launcher import CPU_RANKS_PER_CORE, LAUNCHER_TORCHRUN_GROUP, TORCHRUN_GROUP

TYPE_CHECKING = False  # typing stays unimported: --dry_run must start fast
if TYPE_CHECKING:
    from collections.abc import Sequence

TRAIN_SCRIPT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "train.py")
RDZV_BACKENDS = ["static", "c10d", "etcd", "etcd-v2"]

EPILOG = """\
examples:
  # every visible GPU on this machine, rsl_rl
  mgpu-lab train_multigpu --task Toy-Cartpole-v0 --max_iterations 100

  # two GPUs with skrl; print the command without running it
  mgpu-lab train_multigpu --num_gpus 2 --rl_library skrl --task Toy-Cartpole-v0 --dry_run

  # rehearse on CPU: two ranks on gloo, no GPU needed
  mgpu-lab train_multigpu --num_gpus 2 --device cpu --num_envs 64 --max_iterations 2

  # every rank on the console, and per-rank log files under logs/torchrun
  mgpu-lab train_multigpu --num_gpus 2 --log_all_ranks --tee 3 --log_dir logs/torchrun

  # two nodes, static rendezvous (run on each node with its own --node_rank)
  mgpu-lab train_multigpu --nnodes 2 --node_rank 0 --num_gpus 8 \\
      --master_addr 10.0.0.1 --master_port 29500 --task Toy-Cartpole-v0

  # two nodes, c10d rendezvous (same command on every node)
  mgpu-lab train_multigpu --nnodes 2 --num_gpus 8 --rdzv_backend c10d \\
      --rdzv_endpoint 10.0.0.1:29400 --rdzv_id job42 --task Toy-Cartpole-v0

  # skrl with JAX: skrl's own launcher, integer --num_gpus
  mgpu-lab train_multigpu --rl_library skrl --ml_framework jax --num_gpus 2 \\
      --coordinator_address 127.0.0.1:5000 --task Toy-Cartpole-v0

Arguments after a '--' go to train.py untouched; every other unknown argument is checked against
train.py's own options and the task list before any rank starts. Output: by default only local rank 0
of each node reaches the console (torchrun --local_ranks_filter 0). torchrun options that you do not
give are not passed, so torchrun's own PET_* environment (a Kubernetes PyTorchJob) applies.

watchdog: every rank beats once at start-up and whenever it makes progress (a training iteration,
a collective, or an optimizer step of any script: a rank that trains alone counts). When no rank has
made progress for --hang_timeout seconds (default 300; 0 turns it off) once every rank trains, or
for --startup_timeout seconds (default 1200; 0: no limit) while some rank has not begun training,
the launcher says which limit fired, asks every rank for its Python stack, prints where each rank
is and the likely culprit, writes the stacks and a summary under <run folder>/watchdog/, stops the
job and exits 3. PyTorch's flight recorder is on for every backend (TORCH_FR_BUFFER_SIZE=2000 unless
you set it): on a hang, and when a rank fails, every live rank writes its dump into <run folder>/
flight_recorder/, and `mgpu-lab trace RUN` names the first collective the ranks disagree on. On CUDA
ranks NCCL's own dumps go where the launcher says.

exit status: 0 done; 1 training failed (the launcher's report names the failed ranks, their nodes
and last error lines, and what came first; torchrun's own text is kept in a file it names); 2 refused
input (by the launcher, nothing started; or by every rank: "all N ranks refused: ..."); 3 hang
(watchdog); 4 rendezvous deadline passed (--rdzv_timeout); 128+N after the launcher got signal N
(130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP).

devices: CUDA_VISIBLE_DEVICES is checked against the GPUs that exist (the driver's list, or
nvidia-smi -L): a missing, malformed or repeated entry is refused in one line, --dry_run included.

signals: the job runs in its own process group. The first Ctrl-C (SIGINT), SIGTERM or SIGHUP is
forwarded to it; if the job has not stopped after a grace period (MGPU_LAB_KILL_GRACE_S, default
10 s), every process of the job is killed. A second Ctrl-C kills at once. Whatever ends the launcher
(even SIGKILL), the job's processes go with it; a process that daemonises with a cleared environment
goes too only where the launcher can make the job a cgroup of its own (a writable cgroup v2: root, or
a delegated subtree), and the launcher says so in one line where it cannot.

skrl JAX: skrl's launcher does not report its workers' exit codes. This launcher sets
TORCHELASTIC_ERROR_FILE for the ranks, so a rank that dies of an uncaught exception (train.py's
entry point is wrapped in torch's elastic `record`) still makes the launcher exit 1; a rank that
exits non-zero without an exception is not detected there.

any script: --train_script PATH (or -m MODULE) runs your own torch.distributed script, or Isaac Lab's
scripts/reinforcement_learning/<library>/train.py, on every rank instead of this project's train.py.
Every argument the launcher does not know goes to that script unchanged (--device cpu too, which still
makes the ranks CPU processes on gloo); --rl_library and train.py's checks do not apply, and
--continue_run and --checkpoint latest are refused (the launcher cannot know the script's checkpoints).
Each rank starts through a small entry of this package that installs the supervision first: a heartbeat
on every collective it completes (torch.distributed calls and DDP's gradient all-reduce), the stack
dump, per-rank timing. The watchdog, mgpu-lab stacks, mgpu-lab timing and the failure report then work
as with train.py; their files go under --job_log_root/train_multigpu/<script>/<time>/.
  mgpu-lab train_multigpu --num_gpus 2 --device cpu --train_script my_ddp.py --epochs 3

"""


_usage_error = OneLineErrors("mgpu-lab train_multigpu")  # argparse's errors: one line, exit 2, no usage block


# The literal argparse table stays compact (a few lines an option), as readers and the checker read it.
# fmt: off
def build_parser() -> argparse.ArgumentParser:
    """The launcher's options. Every unknown argument is forwarded to train.py.

    Defaults of None/False mean "not given": such an option is not passed on. The argument groups say
    where an option goes: :data:`TORCHRUN_GROUP` options are passed to torchrun as given,
    :data:`LAUNCHER_TORCHRUN_GROUP` options are torchrun-only but interpreted by the launcher.
    """
    parser = argparse.ArgumentParser(
        prog="mgpu-lab train_multigpu",
        description=(
            "Launch scripts/reinforcement_learning/train.py on several GPUs or nodes through torchrun\n"
            "(python -m torch.distributed.run), or through skrl's JAX launcher for\n"
            "--rl_library skrl --ml_framework jax. Options not listed here (--task, --num_envs,\n"
            "--max_iterations, --seed, --device, ...) are passed to train.py unchanged, and\n"
            "--distributed is added for you."
        ),
        epilog=EPILOG,
        formatter_class=RawHelpFormatter,
        allow_abbrev=False,
    )
    parser.error = _usage_error  # type: ignore[method-assign]  # one-line errors, exit 2

    job = parser.add_argument_group("job")
    job.add_argument(
        "--rl_library", choices=["rsl_rl", "rl_games", "skrl"], default="rsl_rl",
        help="RL library that train.py trains with; not passed to a --train_script, except to Isaac Lab's "
             "trainer, whose own option it is, when given (default: rsl_rl).",
    )
    job.add_argument(
        "--train_script", default=None, metavar="PATH",
        help="Run this training script on every rank instead of train.py, with every argument the launcher "
             "does not know, unchanged. Every launcher option applies except --rl_library; train.py's checks "
             "are skipped, --continue_run and --checkpoint latest are refused.",
    )
    job.add_argument(
        "-m", "--train_module", default=None, metavar="MODULE",
        help="Like --train_script, for a module run as python -m MODULE.",
    )
    job.add_argument(
        "--job_log_root", default="logs", metavar="DIR",
        help="With --train_script or -m: where the job's records go (watchdog and live stacks, per-rank timing, "
             "torchrun's failure text), under DIR/train_multigpu/<script>/<time>/ (default: logs).",
    )
    job.add_argument(
        "--num_gpus", "--nproc_per_node", dest="num_gpus", default="gpu", metavar="N|gpu|cpu|auto",
        help=(
            "Ranks per node: an integer, 'gpu' (every visible GPU), 'cpu' (one rank per CPU core) or "
            "'auto' (GPUs if any, else CPU cores). An integer must not exceed the visible GPUs, "
            "unless train.py gets --device cpu, which runs the ranks as CPU processes on gloo "
            f"(at most {CPU_RANKS_PER_CORE} per CPU core) (default: gpu)."
        ),
    )
    job.add_argument(
        "--nnodes", default=None, metavar="N|MIN:MAX",
        help="Number of nodes, or an elastic range MIN:MAX (torchrun's default: 1).",
    )
    job.add_argument(
        "--node_rank", type=int, default=None,
        help="Rank of this node, 0 to nnodes-1; used by the static rendezvous (torchrun's default: 0).",
    )
    job.add_argument(
        "--dry_run", action="store_true",
        help="Print the resolved command, shell-quoted, and exit without running it.",
    )

    run = parser.add_argument_group(TORCHRUN_GROUP)
    run.add_argument(
        "--master_addr", default=None,
        help="Address of node 0 for the static rendezvous (torchrun's default: 127.0.0.1).",
    )
    run.add_argument(
        "--master_port", type=int, default=None,
        help="Free port on node 0 for the static rendezvous (torchrun's default: 29500); leave it out on "
             "one node (the launcher passes --standalone: a free port). A held port is refused, naming its pid.",
    )
    run.add_argument(
        "--rdzv_backend", choices=RDZV_BACKENDS, default=None,
        help="Rendezvous backend, e.g. c10d for a dynamic rendezvous (torchrun's default: static).",
    )
    run.add_argument(
        "--rdzv_endpoint", default=None, metavar="HOST:PORT",
        help="Rendezvous endpoint for --rdzv_backend c10d (c10d's default port: 29400).",
    )
    run.add_argument(
        "--rdzv_id", default=None,
        help="Job id shared by every node of one c10d rendezvous.",
    )
    run.add_argument(
        "--max_restarts", type=int, default=None,
        help="Restarts of the whole worker group after a failure before giving up (torchrun's default: 0). "
             "A restarted group resumes from the run's newest checkpoint.",
    )
    run.add_argument(
        "--monitor_interval", type=float, default=None, metavar="SECONDS",
        help="How often torchrun checks its workers (torchrun's default: 0.1).",
    )
    run.add_argument(
        "--start_method", choices=["spawn", "fork", "forkserver"], default=None,
        help="Multiprocessing start method of the workers (torchrun's default: spawn).",
    )
    run.add_argument(
        "--role", default=None,
        help="User-defined role name of the workers (torchrun's default: default).",
    )
    run.add_argument(
        "--virtual_local_rank", action="store_true",
        help="torchrun's virtual local rank: each worker sees LOCAL_RANK=0 and only its own GPU, as cuda:0.",
    )
    run.add_argument(
        "--tee", default=None, metavar="0|1|2|3|MAP",
        help="Copy worker output to per-rank log files and the console: 1 stdout, 2 stderr, 3 both, "
             "or a per-rank map such as 0:1,1:3.",
    )
    run.add_argument(
        "--redirects", default=None, metavar="0|1|2|3|MAP",
        help="Send worker output to per-rank log files only (same values as --tee).",
    )
    run.add_argument(
        "--log_dir", default=None,
        help="Directory for torchrun's per-rank log files and error files "
             "(<log_dir>/<run_id>_*/attempt_<k>/<local_rank>/).",
    )
    run.add_argument(
        "--local_ranks_filter", default=None, metavar="RANKS",
        help="Comma-separated local ranks whose output reaches the console (launcher default: 0).",
    )

    own = parser.add_argument_group(LAUNCHER_TORCHRUN_GROUP)
    own.add_argument(
        "--log_all_ranks", action="store_true",
        help="Show every local rank on the console instead of local rank 0 only.",
    )
    own.add_argument(
        "--rdzv_timeout", type=float, default=None, metavar="SECONDS",
        help="Deadline for every node to join the rendezvous; while waiting the launcher says who is "
             "missing and how long is left, then exits 4 (default: 600, torchrun's own join timeout).",
    )

    watch = parser.add_argument_group("supervision")
    watch.add_argument(
        "--hang_timeout", type=float, default=300, metavar="SECONDS",
        help="Stop the job and report every rank's stack when no rank made progress for this long once "
             "every rank trains; 0 turns the watchdog off; at least the monitor interval (default: 300).",
    )
    watch.add_argument(
        "--startup_timeout", type=float, default=1200, metavar="SECONDS",
        help="The watchdog's limit while some rank has not begun its first training iteration (library "
             "import, JIT, a first Isaac Sim start); never shorter than --hang_timeout; 0 leaves start-up "
             "unwatched (default: 1200).",
    )
    watch.add_argument(
        "--no_slurm", action="store_true",
        help="Do not fill --nnodes, --node_rank and the rendezvous from a SLURM job's environment.",
    )

    jax = parser.add_argument_group("skrl JAX")
    jax.add_argument(
        "--coordinator_address", default=None, metavar="HOST:PORT",
        help="JAX coordinator (process 0) for --rl_library skrl --ml_framework jax "
             "(skrl's default: 127.0.0.1:5000).",
    )
    return parser
# fmt: on


def main(argv: Sequence[str] | None = None) -> int:
    from mgpu_lab.launch import launcher

    return launcher.main(build_parser(), list(sys.argv[1:] if argv is None else argv), train_script=TRAIN_SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
