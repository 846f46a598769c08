"""Built-in toy tasks: shapes, batching, auto-reset, determinism, gymnasium registration."""

from __future__ import annotations

import math
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgpu_lab.train import tasks
from mgpu_lab.train.tasks import TASKS, UnknownTaskError, make_env

TASK_IDS = list(TASKS)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rollout(env, steps: int, seed: int = 0):
    """Random actions from their own generator; returns stacked obs and rewards."""
    g = torch.Generator().manual_seed(seed)
    obs_list, rew_list = [env.reset()], []
    for _ in range(steps):
        a = torch.rand(env.num_envs, env.num_actions, generator=g) * 2 - 1
        obs, rew, *_ = env.step(a.to(env.device))
        obs_list.append(obs)
        rew_list.append(rew)
    return torch.stack(obs_list), torch.stack(rew_list)


def test_known_tasks_are_toys_not_isaac_tasks():
    assert {"Toy-Cartpole-v0"} <= set(TASKS)
    assert len(TASKS) >= 2
    for task_id in TASKS:
        assert task_id.startswith("Toy-") and task_id.endswith("-v0")
        assert not task_id.startswith("Isaac")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("task_id", TASK_IDS)
def test_shapes_dtypes_and_device(task_id, device):
    env = make_env(task_id, num_envs=7, device=device, seed=3)
    assert env.num_envs == 7 and env.max_episode_length > 0
    obs = env.reset()
    assert obs.shape == (7, env.num_obs) and obs.dtype == torch.float32
    assert obs.device.type == torch.device(device).type
    obs, rew, term, trunc, extras = env.step(torch.zeros(7, env.num_actions, device=device))
    assert obs.shape == (7, env.num_obs)
    assert rew.shape == (7,) and rew.dtype == torch.float32
    assert term.shape == (7,) and term.dtype == torch.bool
    assert trunc.shape == (7,) and trunc.dtype == torch.bool
    assert extras["episode_return"].ndim == 1 and extras["episode_length"].ndim == 1
    assert extras["time_outs"].shape == (7,)
    assert all(t.device.type == torch.device(device).type for t in (obs, rew, term, trunc))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_same_seed_same_trajectory_other_seed_differs(task_id):
    a_obs, a_rew = rollout(make_env(task_id, 16, "cpu", seed=5), 300)
    b_obs, b_rew = rollout(make_env(task_id, 16, "cpu", seed=5), 300)
    c_obs, _ = rollout(make_env(task_id, 16, "cpu", seed=6), 300)
    assert torch.equal(a_obs, b_obs) and torch.equal(a_rew, b_rew)
    assert not torch.equal(a_obs, c_obs)
    # reset(seed=...) re-seeds: the run repeats
    env = make_env(task_id, 16, "cpu", seed=99)
    env.reset(seed=5)
    first = env.reset(seed=5)
    assert torch.equal(first, a_obs[0])


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_batched_step_equals_one_env_at_a_time(task_id):
    """The batch is N independent copies: stepping N envs together = stepping each alone."""
    n = 6
    batch = make_env(task_id, n, "cpu", seed=1)
    batch.reset()
    state = batch.state.clone()
    actions = torch.linspace(-1, 1, n).unsqueeze(-1).repeat(1, batch.num_actions)
    obs_b, rew_b, term_b, _, _ = batch.step(actions)
    for i in range(n):
        single = make_env(task_id, 1, "cpu", seed=1)
        single.reset()
        single.state = state[i : i + 1].clone()
        obs_s, rew_s, term_s, _, _ = single.step(actions[i : i + 1])
        assert torch.equal(term_s, term_b[i : i + 1])
        assert torch.allclose(rew_s, rew_b[i : i + 1], atol=1e-6)
        if not term_s.item():  # a finished env is auto-reset to a fresh random state
            assert torch.allclose(obs_s, obs_b[i : i + 1], atol=1e-6)


def test_actions_are_clipped_to_unit_range():
    a = make_env("Toy-Cartpole-v0", 4, "cpu", seed=0)
    b = make_env("Toy-Cartpole-v0", 4, "cpu", seed=0)
    a.reset(), b.reset()
    oa, *_ = a.step(torch.full((4, 1), 50.0))
    ob, *_ = b.step(torch.full((4, 1), 1.0))
    assert torch.equal(oa, ob)


def test_cartpole_falls_under_constant_push_and_auto_resets():
    env = make_env("Toy-Cartpole-v0", 32, "cpu", seed=0)
    env.reset()
    finished_returns, finished_lengths, any_term = [], [], False
    for _ in range(200):
        obs, rew, term, trunc, extras = env.step(torch.ones(32, 1))
        any_term |= bool(term.any())
        finished_returns.append(extras["episode_return"])
        finished_lengths.append(extras["episode_length"])
        # finished envs start over: their counters are zero and their state is small again
        done = term | trunc
        if done.any():
            assert torch.all(env.episode_length_buf[done] == 0)
            assert torch.all(obs[done].abs() <= env.init_range + 1e-6)
            assert torch.all(rew[term] < 0)  # failure penalty
    assert any_term
    lengths = torch.cat(finished_lengths)
    assert lengths.numel() >= 32 and int(lengths.max()) < env.max_episode_length


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_episodes_truncate_at_max_length(task_id):
    env = make_env(task_id, 3, "cpu", seed=0)
    env.reset()
    saw_trunc = False
    for step in range(env.max_episode_length + 1):
        # keep the cart-pole alive with a simple PD controller so the time limit is reached
        if task_id == "Toy-Cartpole-v0":
            x, xd, th, thd = env.state.unbind(-1)
            act = (10 * th + 2 * thd + 0.1 * x + 0.3 * xd).clamp(-1, 1).unsqueeze(-1)
        else:
            act = torch.zeros(3, 1)
        _, _, term, trunc, extras = env.step(act)
        if trunc.any():
            saw_trunc = True
            assert step + 1 == env.max_episode_length
            assert torch.all(extras["episode_length"] == env.max_episode_length)
            assert torch.equal(extras["time_outs"].bool(), trunc)
            break
        assert not term.any()
    assert saw_trunc


def test_pendulum_reward_is_a_cost_and_upright_is_best():
    env = make_env("Toy-Pendulum-SwingUp-v0", 2, "cpu", seed=0)
    env.reset()
    env.state = torch.tensor([[0.0, 0.0], [math.pi, 0.0]])
    obs, rew, *_ = env.step(torch.zeros(2, 1))
    assert torch.all(rew <= 0)
    assert rew[0] > rew[1]
    assert torch.allclose(obs[0], torch.tensor([1.0, 0.0, 0.0]), atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(
    task_index=st.integers(0, len(TASK_IDS) - 1),
    n=st.integers(1, 64),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.0, 100.0),
)
def test_outputs_stay_finite_for_any_actions(task_index, n, seed, scale):
    env = make_env(TASK_IDS[task_index], n, "cpu", seed=seed)
    env.reset()
    g = torch.Generator().manual_seed(seed)
    for _ in range(50):
        obs, rew, _, _, _ = env.step(torch.randn(n, env.num_actions, generator=g) * scale)
        assert torch.isfinite(obs).all() and torch.isfinite(rew).all()


def test_registered_with_gymnasium():
    for task_id in TASK_IDS:
        assert task_id in gym.registry
        env = gym.make(task_id, num_envs=5, device="cpu", seed=0)
        assert isinstance(env.unwrapped, tasks.ToyVecEnv)
        assert env.unwrapped.reset().shape == (5, env.unwrapped.num_obs)
        assert env.unwrapped.single_action_space.shape == (env.unwrapped.num_actions,)


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(UnknownTaskError) as info:
        make_env("Toy-Cartpol-v0", 1)
    msg = str(info.value)
    assert "Toy-Cartpole-v0" in msg and "Toy-Pendulum-SwingUp-v0" in msg and "did you mean" in msg


@pytest.mark.e2e
def test_task_list_needs_no_torch():
    code = "import sys, mgpu_lab.train.tasks as t; assert t.TASKS; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("push", [1.0, -1.0])
def test_cartpole_physics_match_gymnasium_reference(push):
    """Same equations as gymnasium's CartPole (semi-implicit Euler) with a full push either way."""
    import numpy as np

    ref = gym.make("CartPole-v1").unwrapped
    ref.kinematics_integrator = "semi-implicit"
    ref.reset(seed=0)
    env = make_env("Toy-Cartpole-v0", 1, "cpu", seed=0)
    env.reset()
    start = np.array([0.1, -0.2, 0.05, 0.3])
    ref.state = start.copy()
    env.state = torch.tensor(start[None], dtype=torch.float32)
    for _ in range(5):
        ref_obs, *_ = ref.step(1 if push > 0 else 0)
        obs, *_ = env.step(torch.tensor([[push]]))
        assert np.allclose(obs[0].numpy(), ref_obs, atol=1e-5), (obs, ref_obs)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), action=st.floats(-1.0, 1.0))
def test_cartpole_step_does_not_touch_the_callers_tensors(seed, action):
    env = make_env("Toy-Cartpole-v0", 3, "cpu", seed=seed)
    obs = env.reset()
    before = obs.clone()
    actions = torch.full((3, 1), action)
    new_obs, *_ = env.step(actions)
    assert torch.equal(obs, before) and torch.all(actions == action)
    assert not torch.equal(new_obs, before) or action == 0.0


def test_pendulum_physics_and_cost_match_gymnasium_reference():
    import numpy as np

    ref = gym.make("Pendulum-v1", g=10.0).unwrapped
    ref.reset(seed=0)
    env = make_env("Toy-Pendulum-SwingUp-v0", 1, "cpu", seed=0)
    env.reset()
    ref.state = np.array([2.5, -0.7])
    env.state = torch.tensor([[2.5, -0.7]])
    for torque in (1.0, -0.5, 0.25, 1.0, -1.0):
        _, ref_reward, *_ = ref.step(np.array([2.0 * torque], dtype=np.float32))
        _, reward, *_ = env.step(torch.tensor([[torque]]))
        assert np.allclose(env.state[0].numpy(), ref.state, atol=1e-5)
        assert abs(float(reward[0]) - ref_reward) < 1e-4
