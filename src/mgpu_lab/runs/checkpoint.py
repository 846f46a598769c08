"""Reading checkpoints without running code from them.

A pickle can name any importable callable and have the unpickler call it, so a full unpickle (torch's
loader with its weights-only guard turned off, or the pickle module) runs whatever a crafted file asks for. Users load
checkpoints from colleagues and model hubs, so every checkpoint here is read in one of two ways:

- torch checkpoints (rsl_rl, rl_games, skrl torch): ``torch.load(..., weights_only=True)``, whose
  unpickler builds only tensors, plain containers (dict, OrderedDict, list, tuple, set), numbers,
  strings, bytes and None, plus the extra types allow-listed per library in :data:`EXTRA_GLOBALS`.
  Everything our adapters write needs no extra type (``tests/hostile/test_checkpoint_security.py``
  checks each library's files with ``get_unsafe_globals_in_checkpoint``).
- skrl JAX checkpoints: MessagePack (:func:`write_msgpack` / :func:`read_msgpack`), decoded by
  ``flax.serialization.msgpack_restore``, which knows maps, arrays, numbers, strings and bytes
  and nothing that could be called. Old skrl JAX ``.pickle`` files are refused, never unpickled.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgpu_lab.core.errors import UsageError

#: Suffix of the skrl JAX checkpoints mgpu-lab writes (MessagePack; skrl's own default is a pickle).
JAX_SUFFIX = ".msgpack"
#: What a MessagePack checkpoint says it is (the first key of the top-level map).
JAX_FORMAT = "mgpu_lab.skrl_jax.v1"


def _numpy_scalar_globals() -> list[Any]:
    """A NumPy float scalar (rl_games stores ``last_mean_rewards`` as one once it tracks the best reward)."""
    import numpy as np  # numpy: only for an rl_games checkpoint

    try:
        from numpy._core.multiarray import scalar  # NumPy 2
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core.multiarray import scalar  # type: ignore[no-redef]
    return [scalar, np.dtype, type(np.dtype(np.float32)), type(np.dtype(np.float64))]


#: --rl_library -> a function returning the types a checkpoint of that library may hold beyond
#: torch's weights-only set (tensors, plain containers, numbers, strings, None).
EXTRA_GLOBALS: dict[str, Callable[[], list[Any]]] = {
    "rsl_rl": list,
    "skrl": list,
    "rl_games": _numpy_scalar_globals,
}


def _unsafe_names(path: str) -> list[str]:
    """The globals a torch checkpoint would import (read from the pickle's opcodes, nothing executed)."""
    from torch.serialization import get_unsafe_globals_in_checkpoint  # torch: only when a checkpoint is read

    try:
        return list(get_unsafe_globals_in_checkpoint(path))
    except Exception:  # noqa: BLE001 - not a zip checkpoint, or unreadable: the caller's message stands
        return []


def load_torch(path: str | os.PathLike, library: str) -> Any:
    """``torch.load`` on the CPU that builds only allow-listed types; UsageError (one line) for anything else.

    A file that would import anything outside torch's weights-only set and ``EXTRA_GLOBALS[library]``
    is refused before any of it is built, naming what it would have imported.
    """
    return _load_restricted(path, EXTRA_GLOBALS.get(library, list)())


def _load_restricted(path: str | os.PathLike, extra: list[Any]) -> Any:
    import torch  # torch: only when a checkpoint is read (the launcher's checks load this module without it)

    shown = str(path)
    try:
        with torch.serialization.safe_globals(extra), warnings.catch_warnings():
            # torch's note on a pickle protocol it did not write (any junk file starting 0x80 N): the refusal
            # below says what matters, in one line
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        allowed = {f"{g.__module__}.{g.__qualname__}" for g in extra}
        names = [n for n in _unsafe_names(shown) if n not in allowed]
        if not names and "Unsupported global" not in str(exc):  # not a pickle torch could read at all
            raise UsageError(f"--checkpoint {shown}: not a checkpoint (torch.load cannot read it)") from None
        what = f" (it would import {', '.join(names[:3])})" if names else ""
        raise UsageError(
            f"--checkpoint {shown}: refused: not a plain-tensor checkpoint{what}; loading it could "
            "run code, and only tensors, numbers and plain containers are loaded"
        ) from None
    except Exception as exc:  # noqa: BLE001 - whatever torch.load raises, the file is not a checkpoint
        raise UsageError(
            f"--checkpoint {shown}: not a checkpoint (torch.load cannot read it: {type(exc).__name__})"
        ) from None


def load_torch_dict(path: str | os.PathLike, library: str, required: tuple[str, ...], kind: str) -> dict[str, Any]:
    """:func:`load_torch`, then require a dict with the ``required`` keys (``kind`` names it in the error)."""
    data = load_torch(path, library)
    if not isinstance(data, dict) or any(key not in data for key in required):
        wanted = " and ".join(repr(key) for key in required)
        raise UsageError(f"--checkpoint {path}: not {kind} checkpoint (expected {wanted} entries)")
    return data


def encode_msgpack(modules: dict[str, bytes]) -> bytes:
    """A skrl JAX checkpoint: ``{format: JAX_FORMAT, modules: {name: flax-serialized bytes}}`` as MessagePack."""
    from flax import serialization  # flax: only for a skrl JAX checkpoint

    return serialization.msgpack_serialize({"format": JAX_FORMAT, "modules": dict(modules)})


def read_msgpack(path: str | os.PathLike) -> dict[str, bytes]:
    """The modules of a skrl JAX checkpoint written by :func:`encode_msgpack`; UsageError (one line) otherwise.

    Pickles (skrl's own ``.pickle`` format) are refused without being unpickled.
    """
    from flax import serialization  # flax: as above

    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--checkpoint {shown}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if raw[:1] == b"\x80":  # pickle protocol 2+ opcode PROTO
        raise UsageError(
            f"--checkpoint {shown}: refused: a pickle (skrl's own JAX format) can run code when "
            f"loaded; mgpu-lab reads only its own {JAX_SUFFIX} skrl JAX checkpoints"
        )
    try:
        data = serialization.msgpack_restore(raw)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types for malformed input
        raise UsageError(f"--checkpoint {shown}: not a readable skrl JAX checkpoint ({type(exc).__name__})") from None
    modules = data.get("modules") if isinstance(data, dict) and data.get("format") == JAX_FORMAT else None
    if not isinstance(modules, dict) or not all(isinstance(v, bytes) for v in modules.values()):
        raise UsageError(f"--checkpoint {shown}: not a skrl JAX checkpoint (expected a {JAX_FORMAT} map)")
    return modules


#: --rl_library -> (the entries its torch checkpoints hold, how to name such a checkpoint in a message)
LIBRARY_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "rsl_rl": (("actor_state_dict", "critic_state_dict"), "an rsl_rl"),
    "rl_games": (("model", "epoch"), "an rl_games"),
    "skrl": (("policy", "value"), "a skrl PPO"),
}


def _load_any(path: str | os.PathLike) -> Any:
    """:func:`load_torch` with every library's allow-list (all plain types), to tell who wrote a file."""
    extra: list[Any] = []
    for make in EXTRA_GLOBALS.values():
        extra += [g for g in make() if g not in extra]
    return _load_restricted(path, extra)


def read_skrl_jax(path: str | os.PathLike) -> dict[str, bytes]:
    """The modules of a skrl JAX PPO checkpoint (MessagePack), or a one-line UsageError; pickles are refused."""
    modules = read_msgpack(path)
    keys, kind = LIBRARY_KEYS["skrl"]
    if any(key not in modules for key in keys):
        wanted = " and ".join(repr(key) for key in keys)
        raise UsageError(f"--checkpoint {path}: not {kind} checkpoint for JAX (expected {wanted} entries)")
    return modules


def written_by(data: Any) -> str | None:
    """The library whose checkpoint layout ``data`` has, or None."""
    if not isinstance(data, dict):
        return None
    for library, (keys, _) in LIBRARY_KEYS.items():
        if all(key in data for key in keys):
            return library
    return None


#: --rl_library -> the entry of its torch checkpoints that holds the policy's state dict
POLICY_KEY = {"rsl_rl": "actor_state_dict", "rl_games": "model", "skrl": "policy"}


def observation_width(data: dict[str, Any], library: str) -> int | None:
    """How many observations the checkpoint's policy takes: the input width of its first weight matrix."""
    policy = data.get(POLICY_KEY[library])
    if not isinstance(policy, dict):
        return None
    for value in policy.values():
        shape: tuple[int, ...] = tuple(getattr(value, "shape", ()))
        if len(shape) == 2:
            return int(shape[1])
    return None


def _check_task(path: str | os.PathLike, data: dict[str, Any], library: str, task: str, expected: int | None) -> None:
    width = observation_width(data, library)
    if expected is not None and width is not None and width != expected:
        raise UsageError(
            f"--checkpoint {path}: its policy takes {width} observations and {task} gives {expected}: "
            f"a checkpoint of another task; give the --task it was trained on"
        )


def check_library(
    path: str | os.PathLike,
    library: str,
    ml_framework: str = "torch",
    task: str | None = None,
    task_obs: int | None = None,
) -> None:
    """UsageError (one line) unless ``path`` is a checkpoint of ``library`` in the format the trainer loads, and
    (given ``task`` and ``task_obs``, its observation count) its policy takes that task's observations. The task's
    count comes from the trainer's layer (:func:`mgpu_lab.train.checks.check_checkpoint`): runs know no task.

    Read with the same restricted loading as training (weights-only torch, or MessagePack for skrl JAX);
    needs torch (and flax for skrl JAX) but no RL library.
    """
    if library == "skrl" and ml_framework == "jax":
        read_skrl_jax(path)
        return
    data = _load_any(path)
    found = written_by(data)
    if found == library:
        if task is not None:
            _check_task(path, data, library, task, task_obs)
        return
    keys, kind = LIBRARY_KEYS[library]
    if found is not None:
        raise UsageError(
            f"--checkpoint {path}: not {kind} checkpoint: {found} wrote it; give --rl_library "
            f"{found}, or {kind} checkpoint"
        )
    wanted = " and ".join(repr(key) for key in keys)
    raise UsageError(f"--checkpoint {path}: not {kind} checkpoint (expected {wanted} entries)")
