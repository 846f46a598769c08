"""The list of built-in tasks, importable without torch (for quick argument checks)."""

from __future__ import annotations

#: task id -> one-line description (for listings and error messages)
TASKS: dict[str, str] = {
    "Toy-Cartpole-v0": "cart-pole balancing with a continuous push force (pure PyTorch, batched)",
    "Toy-Pendulum-SwingUp-v0": "torque-limited pendulum swing-up and balance (pure PyTorch, batched; harder)",
}

#: task id -> defaults used by train.py when --num_envs / --max_iterations are not given
TASK_DEFAULTS: dict[str, dict[str, int]] = {
    "Toy-Cartpole-v0": {"num_envs": 256, "max_iterations": 100},
    "Toy-Pendulum-SwingUp-v0": {"num_envs": 256, "max_iterations": 150},
}


def unknown_task_message(task_id: str) -> str:
    """One line naming the known tasks (and the closest one, if any)."""
    import difflib  # only for an unknown task: the launcher's --dry_run reads this module and must start fast

    close = difflib.get_close_matches(task_id, list(TASKS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown task {task_id!r}{hint}; known tasks: {', '.join(TASKS)}"
