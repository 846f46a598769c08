"""The ``mgpu-lab`` command: thin pass-through to the entry scripts.

``mgpu-lab train ARGS``, ``mgpu-lab train_multigpu ARGS`` and ``mgpu-lab play ARGS`` run
``scripts/reinforcement_learning/train.py``, ``train_multigpu.py`` and ``play.py`` with ARGS unchanged: the
scripts' own argparse is the one truth about their flags (so ``--help`` after a subcommand is the
script's help). The current process is replaced by the script (``os.execv``), so signals and the
exit status are the script's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from mgpu_lab.core.names import LATEST

#: subcommand -> (script path relative to the repository root, one-line help)
ENTRY_SCRIPTS: dict[str, tuple[str, str]] = {
    "train": (
        "scripts/reinforcement_learning/train.py",
        "Train one process (one GPU, or the CPU) with rsl_rl, rl_games or skrl.",
    ),
    "train_multigpu": (
        "scripts/reinforcement_learning/train_multigpu.py",
        "Launch train.py on several GPUs or nodes through torchrun (or skrl's JAX launcher).",
    ),
    "play": (
        "scripts/reinforcement_learning/play.py",
        "Evaluate a checkpoint of any library on one device: mean and spread of the return.",
    ),
}


def repo_root() -> Path:
    """The checkout this package runs from (the project is installed in editable mode)."""
    override = os.environ.get("MGPU_LAB_ROOT")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[3]


def script_path(name: str) -> Path:
    return repo_root() / ENTRY_SCRIPTS[name][0]


def _run_script(name: str, args: tuple[str, ...]) -> None:
    path = script_path(name)
    if not path.is_file():
        click.echo(
            f"error: {path} not found; run `mgpu-lab` from a source checkout "
            "(`uv sync` installs it in editable mode) or set MGPU_LAB_ROOT to the checkout.",
            err=True,
        )
        sys.exit(2)
    argv = [sys.executable, str(path), *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


_PASS_THROUGH = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "allow_interspersed_args": False,
    "help_option_names": [],  # --help goes to the script's own argparse
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mgpu-lab", prog_name="mgpu-lab")
def main() -> None:
    """Train RL policies on one or many GPUs (or CPU ranks for rehearsal).

    Every argument after the subcommand is passed unchanged to its entry script; run
    `mgpu-lab SUBCOMMAND --help` for the script's own options.
    """


def _make_command(name: str) -> click.Command:
    help_text = ENTRY_SCRIPTS[name][1]

    @click.command(
        name=name, context_settings=_PASS_THROUGH, help=help_text, short_help=help_text, add_help_option=False
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        _run_script(name, args)

    return command


for _name in ENTRY_SCRIPTS:
    main.add_command(_make_command(_name))


@main.command(name="stacks")
@click.argument("run", default=LATEST)
@click.option("--log_root", default="logs", show_default=True, help="Where `latest` looks for a live job's run folder.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the launcher's answer.",
)
def stacks(run: str, log_root: str, timeout_s: float) -> None:
    """Every rank's Python stack from a running job, without stopping it.

    RUN is a run folder, or `latest`: the newest one under --log_root that a live job writes. The launcher
    of that job writes the stacks under RUN/stacks/<time>/ and a one-line-per-rank summary. Exit 0 done,
    1 no answer in time, 2 no live launcher to ask.
    """
    from mgpu_lab.health.live_stacks import request  # the watchdog's machinery: mgpu-lab --help never loads it

    sys.exit(request(run, log_root, timeout_s))


@main.command(name="timing")
@click.argument("run", default=LATEST)
@click.option(
    "--log_root", default="logs", show_default=True, help="Where `latest` looks for the newest run folder with timing."
)
def timing(run: str, log_root: str) -> None:
    """Per-rank compute and collective-wait time of a run, and the rank persistently slower than the others.

    RUN is a run folder (the built-in trainer's, or the records folder of a --train_script job), or `latest`:
    the newest one under --log_root with a timing/ folder. It works on a running job too. Exit 0 printed
    (with or without a straggler), 2 no timing found.
    """
    from mgpu_lab.health import timing as rank_timing  # statistics, the record codec: not for mgpu-lab --help

    folder = rank_timing.find_run(run, log_root)
    try:
        lines = rank_timing.report_lines(folder) if folder is not None else []
    except rank_timing.Unusable as exc:
        click.echo(f"mgpu-lab timing: error: {exc}", err=True)
        sys.exit(2)
    if folder is None or not lines:
        where = f"under {Path(log_root).resolve()}" if run == LATEST else f"in {run}"
        click.echo(
            f"mgpu-lab timing: error: no per-rank timing {where} (ranks record it when started by "
            "mgpu-lab train_multigpu)",
            err=True,
        )
        sys.exit(2)
    click.echo(f"{rank_timing.PREFIX} {folder.resolve()}")
    for line in lines:
        click.echo(line)


@main.command(name="trace")
@click.argument("run", default=LATEST)
@click.option(
    "--log_root", default="logs", show_default=True, help="Where `latest` looks for the newest run folder with dumps."
)
def trace(run: str, log_root: str) -> None:
    """Read every rank's flight recorder dump of a run and name the first collective the ranks disagree on.

    RUN is a run folder (its flight_recorder/ subfolder, written by every live rank when the launcher's watchdog
    found a hang or a rank failed), a folder of dumps (NCCL's own too), or `latest`: the newest run under
    --log_root with dumps. The ranks are lined up by process group and collective sequence number; the report
    names the first collective a rank never posted, or posted with another operation or size, and the frame that
    posted it. The dumps are pickles: they are read without running code (builtin types only). Exit 0 every rank
    agrees, 1 mismatch found, 2 no usable dumps.
    """
    from mgpu_lab.health import trace as fr_trace  # as stacks and timing: kept off mgpu-lab --help

    folder = fr_trace.find_run(run, log_root)
    if folder is None:
        where = f"under {Path(log_root).resolve()}" if run == LATEST else f"{run}: no such folder"
        click.echo(f"mgpu-lab trace: error: no run with flight recorder dumps {where}", err=True)
        sys.exit(2)
    status, out, err = fr_trace.report(folder)
    for line in out:
        click.echo(line)
    for line in err:
        click.echo(line, err=True)
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    main()
