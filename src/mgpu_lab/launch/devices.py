"""Which NVIDIA GPUs exist here and which of them ``CUDA_VISIBLE_DEVICES`` lets a rank use (no torch import).

The inventory comes from the driver: ``/proc/driver/nvidia/gpus/*/information`` (read without starting a
process), or ``nvidia-smi -L`` when the driver's folder is missing or a MIG device is named (only
``nvidia-smi`` lists MIG UUIDs). ``CUDA_VISIBLE_DEVICES`` is then read the way CUDA reads it: device
indices, or ``GPU-``/``MIG-`` UUIDs (or a unique prefix of one); a negative index (``-1``) hides it and
every device after it. Unlike CUDA, which quietly drops every
entry from the first bad one on, a bad entry, a device that does not exist or a device named twice is
refused here in one line, before any rank starts.

Callers may pass an :class:`Inventory` of their own (the tests rehearse GPU launches with made-up GPUs,
:func:`made_up_uuid`, on a machine without one).
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

DRIVER_DIR = "/proc/driver/nvidia/gpus"
SMI_TIMEOUT_S = 5


class DeviceError(Exception):
    """``CUDA_VISIBLE_DEVICES`` names a device that is malformed, missing or repeated (one line)."""


class Inventory:
    """The GPUs of this machine: their UUIDs in index order, the MIG UUIDs, and where the list came from."""

    def __init__(self, gpus: list[str], migs: list[str], source: str) -> None:
        self.gpus = gpus
        self.migs = migs
        self.source = source

    def __repr__(self) -> str:
        return f"Inventory({len(self.gpus)} GPU(s), {len(self.migs)} MIG, from {self.source})"


def made_up_uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012x}"


def _from_driver() -> Inventory | None:
    try:
        names = sorted(os.listdir(DRIVER_DIR))
    except OSError:
        return None
    uuids = []
    for name in names:
        uuid = ""
        try:
            with open(os.path.join(DRIVER_DIR, name, "information"), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key.strip() == "GPU UUID":
                        uuid = value.strip()
        except OSError:
            pass
        uuids.append(uuid)
    return Inventory(uuids, [], DRIVER_DIR)


def parse_smi(text: str) -> Inventory:
    """The inventory from ``nvidia-smi -L`` (``GPU 0: NAME (UUID: GPU-...)`` and indented MIG lines)."""
    gpus, migs = [], []
    for line in text.splitlines():
        found = re.search(r"\(UUID: ((?:GPU|MIG)-[^)\s]+)\)", line)
        if line.startswith("GPU "):
            gpus.append(found.group(1) if found else "")
        elif found and found.group(1).startswith("MIG-"):
            migs.append(found.group(1))
    return Inventory(gpus, migs, "nvidia-smi -L")


def _from_smi() -> Inventory | None:
    import shutil  # shutil, then subprocess: only to ask the driver, never for --device cpu

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    import subprocess  # as above

    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(out)


def discover(environ: Mapping[str, str], *, need_migs: bool = False) -> Inventory:
    """This machine's GPUs (the driver's folder, then ``nvidia-smi -L``)."""
    found = None if need_migs else _from_driver()
    found = found or _from_smi() or _from_driver()
    return found or Inventory([], [], "no NVIDIA driver found")


def _match(entry: str, uuids: list[str]) -> str | None:
    hits = [u for u in uuids if u and u.startswith(entry)]
    return hits[0] if len(hits) == 1 else None


def visible(environ: Mapping[str, str], inventory: Inventory | None = None) -> tuple[int, str]:
    """(GPUs a rank can use, where that number came from); DeviceError for a bad ``CUDA_VISIBLE_DEVICES``.

    ``inventory`` is read from the machine (:func:`discover`) when not given.
    """
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in spec.split(",")] if spec is not None and spec.strip() else []
    if spec is not None and not entries:
        return 0, f"CUDA_VISIBLE_DEVICES={spec!r}"
    if inventory is None:
        inventory = discover(environ, need_migs=any(e.startswith("MIG-") for e in entries))
    if spec is None:
        return len(inventory.gpus), inventory.source
    shown = f"CUDA_VISIBLE_DEVICES={spec!r}"
    for entry in entries:  # the form of every entry first: a typo is named before a missing device
        if re.fullmatch(r"-?\d+", entry) is None and not entry.startswith(("GPU-", "MIG-")):
            raise DeviceError(
                f"{shown}: entry {entry!r} is neither a device index nor a GPU-/MIG- UUID "
                "(CUDA would silently drop it and every entry after it); give a list like 0,1"
            )
    chosen: list[str] = []
    for entry in entries:
        if re.fullmatch(r"-\d+", entry):  # CUDA's documented way to hide the devices from here on (-1)
            break
        if re.fullmatch(r"\d+", entry):
            index = int(entry)
            if index >= len(inventory.gpus):
                have = (
                    f"{inventory.source} lists devices 0 to {len(inventory.gpus) - 1}"
                    if inventory.gpus
                    else f"this machine has no NVIDIA GPU: {inventory.source}"
                )
                raise DeviceError(
                    f"{shown}: device {entry} does not exist ({have}); name only devices this "
                    "machine has, or give train.py --device cpu for CPU ranks"
                )
            chosen.append(inventory.gpus[index] or f"#{index}")
        elif entry.startswith(("GPU-", "MIG-")):
            uuid = _match(entry, inventory.gpus if entry.startswith("GPU-") else inventory.migs)
            if uuid is None:
                raise DeviceError(
                    f"{shown}: no device {entry} here ({inventory.source}); "
                    "name only devices this machine has (nvidia-smi -L lists their UUIDs)"
                )
            chosen.append(uuid)
        else:
            raise DeviceError(
                f"{shown}: entry {entry!r} is neither a device index nor a GPU-/MIG- UUID "
                "(CUDA would silently drop it and every entry after it); give a list like 0,1"
            )
    if len(set(chosen)) != len(chosen):
        raise DeviceError(f"{shown}: names one device twice; give each device once")
    return len(chosen), shown
