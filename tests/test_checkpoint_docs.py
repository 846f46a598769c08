"""What the docs say about loading checkpoints, kept true on real checkpoint files.

The section "Load a checkpoint from someone else" of ``docs/source/features/multi_gpu.rst`` and of the
skill's ``reference.md`` makes these statements; each test below is one of them, exercised in-process
on checkpoints that the adapters really wrote (one iteration, four environments, on the CPU):

1. each library's own checkpoints load, read without running code (only tensors, numbers, strings and
   plain containers; a NumPy float for rl_games; skrl JAX: MessagePack);
2. a crafted file is refused, naming what it would have imported, and its code never runs; a skrl JAX
   pickle (skrl's own format) is refused without being unpickled;
3. a checkpoint of another library is refused as "not a/an LIBRARY checkpoint";
4. a checkpoint of another task (same library) is refused as "does not fit";
5. the libraries' own loaders would unpickle the file (so this differs from them).

What the user sees around these messages (``error: `` on stderr, exit status 2, no run folder left)
is the trainer's, tested through the real command in ``tests/hostile/test_checkpoint_security.py``.
"""

from __future__ import annotations

import inspect
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from mgpu_testing.training import OpensMarker

from mgpu_lab.runs import checkpoint
from mgpu_lab.train import adapters
from mgpu_lab.train.config import TrainConfig, UsageError
from mgpu_lab.train.dist import context_from_env

CARTPOLE = "Toy-Cartpole-v0"
PENDULUM = "Toy-Pendulum-SwingUp-v0"
#: kind -> (--rl_library, --ml_framework)
KINDS = {
    "rsl_rl": ("rsl_rl", "torch"),
    "rl_games": ("rl_games", "torch"),
    "skrl": ("skrl", "torch"),
    "skrl_jax": ("skrl", "jax"),
}
TORCH_KINDS = ("rsl_rl", "rl_games", "skrl")
#: what the loader calls each library's checkpoint when a file is not one
NOT_ONE = {
    "rsl_rl": "not an rsl_rl checkpoint (expected 'actor_state_dict' and 'critic_state_dict' entries)",
    "rl_games": "not an rl_games checkpoint (expected 'model' and 'epoch' entries)",
    "skrl": "not a skrl PPO checkpoint (expected 'policy' and 'value' entries)",
    "skrl_jax": "not a readable skrl JAX checkpoint",
}


def config(kind: str, **fields) -> TrainConfig:
    library, framework = KINDS[kind]
    return TrainConfig(rl_library=library, ml_framework=framework, device="cpu", **fields)


def iteration_of(kind: str, path: Path) -> int:
    """What train.py does with a --checkpoint file before training: the safe read, then the library's own check."""
    if kind in TORCH_KINDS:
        checkpoint.load_torch(path, KINDS[kind][0])
    return adapters.load(KINDS[kind][0]).checkpoint_iteration(str(path), config(kind))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """The checkpoint of a one-iteration run of a library on a task, trained in this process on first use."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before skrl imports JAX: this suite never uses a GPU
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[tuple[str, str], Path] = {}

    def get(kind: str, task: str = CARTPOLE) -> Path:
        if (kind, task) not in made:
            log_dir = root / kind / task
            log_dir.mkdir(parents=True)
            cfg = config(kind, task=task, num_envs=4, max_iterations=1, log_root=str(root), log_dir=str(log_dir))
            result = adapters.load(cfg.rl_library).train(cfg, context_from_env("cpu", False))
            made[(kind, task)] = Path(result.checkpoint)
        return made[(kind, task)]

    return get


@pytest.mark.parametrize("kind", KINDS)
def test_own_checkpoints_load_and_hold_only_plain_data(kind: str, trained) -> None:
    path = trained(kind)
    assert iteration_of(kind, path) == 1
    if kind == "skrl_jax":
        assert path.suffix == ".msgpack" and path.read_bytes()[:1] != b"\x80"  # MessagePack, not a pickle
        assert set(checkpoint.read_msgpack(path)) >= {"policy", "value"}
    else:
        from torch.serialization import get_unsafe_globals_in_checkpoint

        # nothing outside torch's weights-only set, so no allow-list entry is even needed
        assert get_unsafe_globals_in_checkpoint(str(path)) == []


@pytest.mark.parametrize("kind", TORCH_KINDS)
def test_a_crafted_torch_file_is_refused_and_its_code_never_runs(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "model_500.pt"
    torch.save(
        {
            "actor_state_dict": OpensMarker(marker),
            "critic_state_dict": {},
            "model": {},
            "epoch": 1,
            "policy": {},
            "value": {},
        },
        path,
    )
    with pytest.raises(UsageError) as caught:
        iteration_of(kind, path)
    assert str(caught.value) == (
        f"--checkpoint {path}: refused: not a plain-tensor checkpoint (it would import "
        "io.open); loading it could run code, and only tensors, numbers and plain "
        "containers are loaded"
    )
    assert not marker.exists()


def test_a_skrl_jax_pickle_is_refused_without_unpickling(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "agent_500.pickle"
    path.write_bytes(pickle.dumps({"policy": OpensMarker(marker), "value": b""}, protocol=4))
    with pytest.raises(UsageError) as caught:
        iteration_of("skrl_jax", path)
    assert str(caught.value) == (
        f"--checkpoint {path}: refused: a pickle (skrl's own JAX format) can run code "
        "when loaded; mgpu-lab reads only its own .msgpack skrl JAX checkpoints"
    )
    assert not marker.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_of_another_library_is_refused(kind: str, trained) -> None:
    for other in KINDS:
        if other == kind:
            continue
        path = trained(other)
        with pytest.raises(UsageError) as caught:
            iteration_of(kind, path)
        text = str(caught.value)
        if kind in TORCH_KINDS and other == "skrl_jax":  # not a torch file at all
            assert text == f"--checkpoint {path}: not a checkpoint (torch.load cannot read it)", text
        else:
            assert text.startswith(f"--checkpoint {path}: {NOT_ONE[kind]}"), text


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_of_another_task_does_not_fit(kind: str, trained, tmp_path: Path) -> None:
    path = trained(kind, PENDULUM)
    assert iteration_of(kind, path) == 1  # the file itself is fine: only the models tell the tasks apart
    cfg = config(
        kind,
        task=CARTPOLE,
        num_envs=4,
        max_iterations=2,
        log_root=str(tmp_path),
        log_dir=str(tmp_path),
        checkpoint=str(path),
        start_iteration=1,
    )
    with pytest.raises(UsageError) as caught:
        adapters.load(cfg.rl_library).train(cfg, context_from_env("cpu", False))
    assert str(caught.value).startswith(f"--checkpoint {path}: does not fit "), caught.value
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and "checkpoint" in p.name]


def test_the_libraries_own_loaders_would_unpickle() -> None:
    """The docs say this loader differs from the libraries' own: each of them would run a crafted file."""
    from rl_games.algos_torch import torch_ext
    from rsl_rl.runners import OnPolicyRunner
    from skrl.agents.jax.base import Agent as JaxAgent
    from skrl.agents.torch.base import Agent as TorchAgent

    assert "weights_only=False" in inspect.getsource(OnPolicyRunner.load)
    assert "safe_load(" in inspect.getsource(torch_ext.load_checkpoint)  # despite its name:
    assert "weights_only=False" in inspect.getsource(torch_ext.safe_load)
    assert "weights_only=False" in inspect.getsource(TorchAgent.load)
    assert "pickle.load(" in inspect.getsource(JaxAgent.load)
