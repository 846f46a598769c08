"""Toy-Cartpole-v0: keep a pole upright on a cart by pushing the cart (continuous force)."""

from __future__ import annotations

import math

import torch

from mgpu_lab.train.tasks.base import ToyVecEnv


class ToyCartpoleEnv(ToyVecEnv):
    """Classic cart-pole dynamics (Barto, Sutton & Anderson 1983; the textbook equations), batched.

    State: cart position x, cart velocity, pole angle theta (0 = upright), pole angular velocity.
    Action: one value in [-1, 1], scaled to a horizontal force of up to ``force_mag`` newtons.
    Reward per step: +1 for staying alive, minus small penalties on pole angle and velocities; -2 on
    failure. An episode ends when the cart leaves [-2.4, 2.4] m or the pole tilts past 12 degrees
    (terminated), or after ``max_episode_length`` steps of 20 ms (truncated).
    """

    num_obs = 4
    num_actions = 1
    state_dim = 4
    max_episode_length = 250
    dt = 0.02
    gravity = 9.8
    mass_cart = 1.0
    mass_pole = 0.1
    half_length = 0.5
    force_mag = 10.0
    x_limit = 2.4
    theta_limit = 12.0 * math.pi / 180.0
    init_range = 0.05

    def _sample_state(self, n: int) -> torch.Tensor:
        return self._uniform(n, -self.init_range, self.init_range, self.state_dim)

    def _observe(self) -> torch.Tensor:
        return self.state.clone()

    def _dynamics(self, actions: torch.Tensor) -> None:
        s = self.state
        x_dot, theta, theta_dot = s[:, 1], s[:, 2], s[:, 3]
        total_mass = self.mass_cart + self.mass_pole
        pole_ml = self.mass_pole * self.half_length
        cos, sin = torch.cos(theta), torch.sin(theta)
        # temp = (force + m_p l thd^2 sin) / M
        temp = (actions[:, 0] * (self.force_mag / total_mass)).add_(
            theta_dot.square().mul_(sin), alpha=pole_ml / total_mass
        )
        denom = cos.square().mul_(-self.mass_pole / total_mass).add_(4.0 / 3.0).mul_(self.half_length)
        theta_acc = (sin * self.gravity).sub_(cos * temp).div_(denom)
        x_acc = temp.sub_(theta_acc * cos, alpha=pole_ml / total_mass)
        # semi-implicit Euler, in place: velocities first, then positions
        x_dot.add_(x_acc, alpha=self.dt)
        theta_dot.add_(theta_acc, alpha=self.dt)
        s[:, 0].add_(x_dot, alpha=self.dt)
        theta.add_(theta_dot, alpha=self.dt)

    def _reward_and_done(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.state
        x, x_dot, theta, theta_dot = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        terminated = (x.abs() > self.x_limit).logical_or_(theta.abs() > self.theta_limit)
        reward = theta.square().neg_().add_(1.0).sub_(x_dot.abs(), alpha=0.01).sub_(theta_dot.abs(), alpha=0.005)
        reward.sub_(terminated.float(), alpha=2.0)
        return reward, terminated
