"""A trained policy, loaded from a checkpoint of any library, as a deterministic ``obs -> actions`` function.

Each library's own model classes rebuild the network (the same configuration the adapters train with), and
the checkpoint is read the adapters' way: weights only (``torch.load(weights_only=True)``, or MessagePack for
skrl JAX), never unpickled. The action is the policy's mean (no sampling), so a play run with a seed repeats
exactly. Nothing here writes files: the libraries' loggers and checkpoint folders stay off.

A checkpoint written at any world size loads the same way: only rank 0 writes checkpoints, and the models in
them are the ones every rank kept identical.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

from mgpu_lab.core.errors import UsageError
from mgpu_lab.train import adapters
from mgpu_lab.train.adapters import skrl, skrl_common
from mgpu_lab.train.config import TrainConfig
from mgpu_lab.train.dist import DistContext

Policy = Callable[[Any], Any]  # observations [N, num_obs] (torch) -> actions [N, num_actions] (torch)


def _does_not_fit(path: str, exc: Exception) -> UsageError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return UsageError(f"--checkpoint {path}: does not fit these models ({first[:160]})")


def _rsl_rl(cfg: TrainConfig, env: Any, path: str) -> Policy:
    from tensordict import TensorDict  # tensordict, rsl_rl's runner: only for an rsl_rl policy

    from mgpu_lab.train.adapters import rsl_rl, rsl_rl_runner

    ctx = DistContext(device=cfg.device)  # one process: no broadcast, no process group
    runner = rsl_rl_runner.DistributedRunner(
        rsl_rl_runner.ToyRslRlEnv(env, cfg.task), rsl_rl.runner_cfg(cfg.task, cfg), None, cfg.device, ctx
    )
    try:
        runner.load(path)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise _does_not_fit(path, exc) from None
    policy = runner.get_inference_policy(cfg.device)
    return lambda obs: policy(TensorDict({"policy": obs}, batch_size=[obs.shape[0]], device=obs.device))


def _rl_games(cfg: TrainConfig, env: Any, path: str) -> Policy:
    from rl_games.algos_torch.model_builder import ModelBuilder  # rl_games: only for an rl_games policy

    from mgpu_lab.train.adapters import rl_games

    params = rl_games.params_for(
        cfg,
        DistContext(device=cfg.device),
        native_multi_gpu=False,
        max_epochs=1,
        train_dir="unused",
        experiment="unused",
    )
    net = (
        ModelBuilder()
        .load(params)
        .build(
            {
                "actions_num": env.num_actions,
                "input_shape": (env.num_obs,),
                "num_seqs": env.num_envs,
                "value_size": 1,
                "normalize_value": params["config"]["normalize_value"],
                "normalize_input": params["config"]["normalize_input"],
            }
        )
    )
    try:
        net.load_state_dict(rl_games.load_checkpoint(path)["model"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise _does_not_fit(path, exc) from None
    net.to(cfg.device).eval()
    return lambda obs: net({"is_train": False, "obs": obs, "prev_actions": None})["mus"]


def _skrl_agent(cfg: TrainConfig, env: Any, path: str) -> Any:
    """skrl's own PPO agent (torch or JAX), built by the adapter's runner with logging and checkpoints off."""
    backend = skrl.backend(cfg)
    skrl_mod = skrl_common.import_skrl(DistContext(device=cfg.device), backend.framework)
    Wrapper, _, Runner = backend.classes(skrl_mod)
    runner_cfg = skrl_common.runner_cfg(cfg, timesteps=1, checkpoint_interval=0)
    runner_cfg["agent"]["experiment"]["write_interval"] = 0  # no TensorBoard folder
    agent = Runner(Wrapper(env, skrl_common.EpisodeStats(skrl_common.ROLLOUTS)), runner_cfg).agent
    try:
        agent.load(path)
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise _does_not_fit(path, exc) from None
    agent.enable_training_mode(False, apply_to_models=True)
    return agent


def _skrl(cfg: TrainConfig, env: Any, path: str) -> Policy:
    agent = _skrl_agent(cfg, env, path)
    if cfg.ml_framework != "jax":
        return lambda obs: agent.act(obs, None, timestep=0, timesteps=1)[1]["mean_actions"]
    import jax.numpy as jnp  # jax, numpy, torch: only for a skrl JAX policy
    import numpy as np
    import torch

    def act(obs: Any) -> Any:
        mean = agent.act(jnp.asarray(obs.detach().cpu().numpy()), None, timestep=0, timesteps=1)[1]["mean_actions"]
        return torch.as_tensor(np.array(mean), device=obs.device)

    return act


_LOADERS: dict[str, Callable[[TrainConfig, Any, str], Policy]] = {
    "rsl_rl": _rsl_rl,
    "rl_games": _rl_games,
    "skrl": _skrl,
}


def load(cfg: TrainConfig, env: Any, path: str) -> Policy:
    """The deterministic policy in ``path`` for ``env`` (a built-in task env of ``cfg.task`` on ``cfg.device``).

    ``cfg`` names the library, framework, task and device; ``path`` was checked with
    :func:`mgpu_lab.runs.checkpoint.check_library` (its library, format and task). UsageError: the library is
    missing, or the checkpoint's models do not fit.
    """
    adapters.require(cfg.rl_library)
    with contextlib.redirect_stdout(io.StringIO()):  # the libraries print their model summaries while building
        return _LOADERS[cfg.rl_library](cfg, env, path)
