"""Hostile checkpoints: a file given to ``--checkpoint`` must never run code.

Threats covered here:

- a torch checkpoint whose pickle calls ``open(MARKER, "w")`` when unpickled (the classic payload,
  shown to work under ``weights_only=False`` first), passed to rsl_rl, rl_games and skrl (torch):
  refused in one line, exit 2, the marker never appears, no run folder is left;
- the same payload as a skrl JAX checkpoint in skrl's own pickle format: refused without unpickling;
- the adapters' loaders (``mgpu_lab.train.dist.load_torch_checkpoint`` behind rsl_rl, rl_games and skrl)
  refuse it in-process too;
- the allow-list is exactly what our checkpoints hold: torch's weights-only set, plus a NumPy float
  scalar for rl_games only (its ``last_mean_rewards``); a NumPy array is refused everywhere;
- no module that loads checkpoints calls ``pickle.load`` or ``torch.load(..., weights_only=False)``.
"""

from __future__ import annotations

import ast
import io
import pickle
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
import torch
from mgpu_testing import REPO
from mgpu_testing.training import OpensMarker, assert_one_line_error, single_env, train_args, train_in_process

from mgpu_lab.runs import checkpoint
from mgpu_lab.train.config import UsageError


def crafted_torch_checkpoint(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "model_7.pt"
    payload = {
        "actor_state_dict": OpensMarker(marker),
        "critic_state_dict": {},
        "iter": 7,
        "model": OpensMarker(marker),
        "epoch": 7,
        "policy": OpensMarker(marker),
        "value": {},
    }
    torch.save(payload, path)
    return path


def test_the_payload_runs_code_under_an_unsafe_load(tmp_path):
    """Control: the crafted file really executes on weights_only=False (so the refusals below mean something)."""
    marker = tmp_path / "pwned"
    path = crafted_torch_checkpoint(tmp_path, marker)
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("library", ["rsl_rl", "rl_games", "skrl"])
def test_crafted_torch_checkpoint_is_refused_by_the_trainer(tmp_path, library):
    """train.py's parser and the trainer, in this process: refused before any library is imported."""
    marker = tmp_path / "pwned"
    path = crafted_torch_checkpoint(tmp_path, marker)
    logs = tmp_path / "logs"
    proc = train_in_process(
        train_args(library, logs, "--num_envs", "4", "--max_iterations", "1", "--checkpoint", str(path)), single_env()
    )
    assert_one_line_error(proc, "refused")
    assert "io.open" in proc.stderr  # names what the file would have imported
    assert not marker.exists()
    assert not [p for p in logs.rglob("*") if p.is_file()]


def test_crafted_skrl_jax_pickle_is_refused_without_unpickling(tmp_path):
    """In this process too: the file is refused from its first byte, before skrl or a JAX backend starts (flax is
    imported to read MessagePack, as test_msgpack_reader_accepts_only_its_own_format does)."""
    marker = tmp_path / "pwned"
    path = tmp_path / "agent_16.pickle"
    path.write_bytes(pickle.dumps({"policy": OpensMarker(marker), "value": b""}, protocol=4))
    logs = tmp_path / "logs"
    proc = train_in_process(
        train_args(
            "skrl", logs, "--ml_framework", "jax", "--num_envs", "4", "--max_iterations", "1", "--checkpoint", str(path)
        ),
        single_env(JAX_PLATFORMS="cpu"),
    )
    assert_one_line_error(proc, "a pickle (skrl's own JAX format) can run code")
    assert not marker.exists()
    assert not [p for p in logs.rglob("*") if p.is_file()]


def test_msgpack_reader_accepts_only_its_own_format(tmp_path):
    good = tmp_path / "agent_16.msgpack"
    good.write_bytes(checkpoint.encode_msgpack({"policy": b"\x80\x81", "value": b""}))
    assert checkpoint.read_msgpack(good) == {"policy": b"\x80\x81", "value": b""}
    other = tmp_path / "other.msgpack"
    from flax import serialization

    other.write_bytes(serialization.msgpack_serialize({"policy": np.zeros(3)}))
    with pytest.raises(UsageError, match="not a skrl JAX checkpoint"):
        checkpoint.read_msgpack(other)
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"\xc1" * 64)  # 0xc1 is never used in MessagePack
    with pytest.raises(UsageError, match="not a readable skrl JAX checkpoint"):
        checkpoint.read_msgpack(junk)


def test_adapter_loaders_refuse_the_payload_in_process(tmp_path):
    from mgpu_lab.train.adapters import rl_games, rsl_rl, skrl

    marker = tmp_path / "pwned"
    path = str(crafted_torch_checkpoint(tmp_path, marker))
    for load in (rsl_rl.check_checkpoint, rl_games.load_checkpoint, skrl.load_torch_checkpoint):
        with pytest.raises(UsageError, match="refused"):
            load(path)
    assert not marker.exists()


def test_allow_list_is_exactly_what_each_library_stores(tmp_path):
    scalar = tmp_path / "rl_games.pth"
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 3, "last_mean_rewards": np.float32(12.5)}, scalar)
    assert checkpoint.load_torch(scalar, "rl_games")["last_mean_rewards"] == np.float32(12.5)
    for library in ("rsl_rl", "skrl"):  # neither stores NumPy values
        with pytest.raises(UsageError, match="numpy"):
            checkpoint.load_torch(scalar, library)
    array = tmp_path / "array.pth"
    torch.save({"model": {}, "epoch": 1, "last_mean_rewards": np.zeros(2)}, array)
    with pytest.raises(UsageError, match="numpy.ndarray"):
        checkpoint.load_torch(array, "rl_games")


def code_without_strings(text: str) -> str:
    """The Python source as its tokens, without strings and comments (docstrings may name unsafe calls)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))


def refusing_unpicklers(text: str) -> set[str]:
    """The classes of a module that subclass ``pickle.Unpickler`` and refuse every global: their ``find_class`` and
    ``persistent_load`` do nothing but raise (such an unpickler builds builtin containers and primitives only)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef) or "pickle.Unpickler" not in {ast.unparse(b) for b in node.bases}:
            continue
        methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        raising = {name for name, f in methods.items() if len(f.body) == 1 and isinstance(f.body[0], ast.Raise)}
        if {"find_class", "persistent_load"} <= raising:
            found.add(node.name)
    return found


def test_the_guard_tells_a_refusing_unpickler_from_a_loading_one():
    refusing = (
        "import pickle\nclass R(pickle.Unpickler):\n    def find_class(self, m, n):\n        raise ValueError(m)\n"
        "    def persistent_load(self, pid):\n        raise ValueError(pid)\n"
    )
    assert refusing_unpicklers(refusing) == {"R"}
    loading = refusing.replace("        raise ValueError(m)\n", "        return getattr(__import__(m), n)\n")
    assert refusing_unpicklers(loading) == set()


def test_no_unsafe_loads_in_the_runtime():
    """A static guard: nothing under src/ or scripts/ unpickles, or calls torch.load without weights_only=True
    (the adapters override the libraries' own loads, which use weights_only=False or pickle.load). The one
    unpickler allowed refuses every global (:func:`refusing_unpicklers`: the flight recorder's reader)."""
    found = []
    for path in [*REPO.joinpath("src").rglob("*.py"), *REPO.joinpath("scripts").rglob("*.py")]:
        text = path.read_text()
        code = code_without_strings(text)
        rel = path.relative_to(REPO)
        refusing = len(refusing_unpicklers(text)) == len(re.findall(r"\(\s*pickle\s*\.\s*Unpickler\s*\)", code))
        if re.search(r"weights_only\s*=\s*False|pickle\s*\.\s*(load|loads)\b", code) or (
            re.search(r"pickle\s*\.\s*Unpickler\b", code) and not refusing
        ):
            found.append(f"{rel}: unpickles")
        for call in re.finditer(r"torch\s*\.\s*load\s*\(", code):
            if not re.match(r"[^()]*(\([^()]*\)[^()]*)*weights_only\s*=\s*True", code[call.end() :]):
                found.append(f"{rel}: torch.load without weights_only=True")
    assert not found, found
