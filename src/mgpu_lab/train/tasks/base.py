"""A small base class for batched-tensor environments (Isaac Lab style: one object, N envs)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch


class ToyVecEnv(gym.Env):
    """N copies of one task stepped together as tensors on ``device``.

    Conventions (shared with the adapters):

    - ``reset() -> obs [N, num_obs]`` resets every env.
    - ``step(actions [N, num_actions])`` clips actions to [-1, 1] and returns
      ``obs, reward [N], terminated [N] bool, truncated [N] bool, extras``. Finished envs are reset
      at once and ``obs`` holds their first observation of the next episode. ``extras`` has
      ``episode_return`` and ``episode_length`` (1-D tensors, one entry per episode that finished
      in this step) and ``time_outs`` (= ``truncated``, as float).
    - Everything random comes from one ``torch.Generator`` seeded by ``seed``, so a run with the same
      seed on the same device repeats exactly.

    Subclasses set ``num_obs``, ``num_actions``, ``max_episode_length``, ``dt`` and implement
    ``_sample_state(n)``, ``_observe()``, ``_dynamics(actions)`` and ``_reward_and_done(actions)``.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium.Env declares it an instance attribute
    num_obs: int
    num_actions: int
    max_episode_length: int
    dt: float
    state_dim: int

    def __init__(self, num_envs: int = 64, device: str | torch.device = "cpu", seed: int = 0) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.seed_value = int(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed_value)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (self.num_obs,), dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), dtype=np.float32)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.num_envs, self.num_obs), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_envs, self.num_actions), dtype=np.float32)
        self.state = torch.zeros(self.num_envs, self.state_dim, device=self.device)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.episode_return_buf = torch.zeros(self.num_envs, device=self.device)
        self.all_ids = torch.arange(self.num_envs, device=self.device)
        self.on_episodes: Any = None  # called with the returns of the episodes that end in a step (make_env)

    # --- to implement -------------------------------------------------------------------------
    def _sample_state(self, n: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _observe(self) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _dynamics(self, actions: torch.Tensor) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _reward_and_done(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    # --- helpers ------------------------------------------------------------------------------
    def _uniform(self, n: int, low: torch.Tensor | float, high: torch.Tensor | float, dim: int) -> torch.Tensor:
        u = torch.rand(n, dim, generator=self.generator, device=self.device)
        return low + (high - low) * u

    def _reset_ids(self, ids: torch.Tensor) -> None:
        n = int(ids.numel())
        if n == 0:
            return
        self.state[ids] = self._sample_state(n)
        self.episode_length_buf[ids] = 0
        self.episode_return_buf[ids] = 0.0

    # --- public API ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> torch.Tensor:  # type: ignore[override]
        """Reset all envs (re-seeding first if ``seed`` is given); return observations [N, num_obs]."""
        if seed is not None:
            self.seed_value = int(seed)
            self.generator.manual_seed(self.seed_value)
        self._reset_ids(self.all_ids)
        return self._observe()

    @torch.no_grad()
    def step(self, actions: torch.Tensor):
        """Advance every env by one step; see the class docstring for what comes back."""
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32)
        actions = actions.reshape(self.num_envs, self.num_actions).clamp(-1.0, 1.0)  # a copy: callers keep theirs
        self._dynamics(actions)
        reward, terminated = self._reward_and_done(actions)
        self.episode_length_buf += 1
        self.episode_return_buf += reward
        truncated = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        done = terminated | truncated
        done_ids = done.nonzero(as_tuple=False).squeeze(-1)
        if done_ids.numel():
            finished_return = self.episode_return_buf[done_ids]  # advanced indexing copies
            finished_length = self.episode_length_buf[done_ids]
            self._reset_ids(done_ids)
            if self.on_episodes is not None:
                self.on_episodes(finished_return)
        else:
            finished_return = self.episode_return_buf[:0].clone()
            finished_length = self.episode_length_buf[:0].clone()
        extras: dict[str, Any] = {
            "episode_return": finished_return,
            "episode_length": finished_length,
            "time_outs": truncated.float(),
        }
        return self._observe(), reward, terminated, truncated, extras

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
