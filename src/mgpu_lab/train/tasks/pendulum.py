"""Toy-Pendulum-SwingUp-v0: swing a torque-limited pendulum up from any angle and hold it upright."""

from __future__ import annotations

import math

import torch

from mgpu_lab.train.tasks.base import ToyVecEnv


class ToyPendulumSwingUpEnv(ToyVecEnv):
    """Inverted pendulum swing-up, batched (the classic control benchmark's dynamics).

    State: angle theta (0 = upright) and angular velocity. The motor is too weak to lift the
    pendulum directly, so the policy must pump energy by swinging back and forth first: harder than
    cart-pole balancing and a better test that learning really happens.
    Observation: cos(theta), sin(theta), angular velocity / max_speed. Action: torque in [-1, 1]
    scaled to ``max_torque``. Reward: -(theta^2 + 0.1 * velocity^2 + 0.001 * torque^2), so 0 is best.
    No failure state; episodes are truncated after ``max_episode_length`` steps of 50 ms.
    """

    num_obs = 3
    num_actions = 1
    state_dim = 2
    max_episode_length = 200
    dt = 0.05
    gravity = 10.0
    mass = 1.0
    length = 1.0
    max_speed = 8.0
    max_torque = 2.0

    def _sample_state(self, n: int) -> torch.Tensor:
        theta = self._uniform(n, -math.pi, math.pi, 1)
        theta_dot = self._uniform(n, -1.0, 1.0, 1)
        return torch.cat((theta, theta_dot), dim=-1)

    def _observe(self) -> torch.Tensor:
        theta, theta_dot = self.state.unbind(-1)
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot / self.max_speed), dim=-1)

    def _dynamics(self, actions: torch.Tensor) -> None:
        theta, theta_dot = self.state.unbind(-1)
        torque = self.max_torque * actions[:, 0]
        self._last_torque = torque
        theta_acc = (
            3.0 * self.gravity / (2.0 * self.length) * torch.sin(theta) + 3.0 / (self.mass * self.length**2) * torque
        )
        theta_dot = (theta_dot + self.dt * theta_acc).clamp(-self.max_speed, self.max_speed)
        self._prev_state = self.state
        theta = theta + self.dt * theta_dot
        self.state = torch.stack((theta, theta_dot), dim=-1)

    def _reward_and_done(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # cost is charged on the state the action was taken in (as in the classic benchmark)
        theta, theta_dot = self._prev_state.unbind(-1)
        angle = torch.remainder(theta + math.pi, 2.0 * math.pi) - math.pi
        cost = angle.square() + 0.1 * theta_dot.square() + 0.001 * self._last_torque.square()
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return -cost, terminated
