"""Drift on a tree laid out like Isaac Lab's repository, without configuration.

Two trees: tests/fixtures/checker/isaaclab_layout (this project's own small text, for the offline inner
loop), and one built at test time from Isaac Lab 3.0's real wheel (``isaaclab==3.0.0``: its
``isaaclab/cli/multigpu.py``, ``isaaclab_rl/entrypoints/`` and the Kit launcher that adds the simulation
options), found in uv's cache or downloaded; nothing of it is committed. Offline without the wheel the
second is skipped, saying why; under CI (``CI=true``) it must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.checker import assert_finding, check, edit, line_of

FIXTURE = REPO / "tests" / "fixtures" / "checker" / "isaaclab_layout"
SKILL = "skills/user/scale-out/SKILL.md"
REF = "skills/user/scale-out/reference.md"
MGPU = "docs/source/features/multi_gpu.rst"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "IsaacLab"
    shutil.copytree(FIXTURE, root)
    (root / "README.md").unlink()
    return root


def test_the_layout_is_clean_and_the_summary_says_what_drift_compared(tree: Path) -> None:
    import contextlib
    import io
    import json

    from skills_check import cli

    assert check(tree, "--no-cache") == (0, [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["check", "--root", str(tree), "--format", "json", "--no-cache"])
    sets = {s["name"]: s for s in json.loads(out.getvalue())["summary"]["rule_sets"]}
    assert sets["drift"]["ran"] and sets["drift"]["why"] == "the defaults"
    assert f"the NCCL list-table at {MGPU}:11 and its mirror at {REF}:5" in sets["drift"]["found"]
    assert "isaaclab train_multigpu (Isaac Lab's layout" in sets["drift"]["found"]
    assert not sets["isaaclab"]["ran"] and sets["isaaclab"]["why"] == "house conventions, not adopted"


def test_a_row_dropped_from_the_rst_list_is_reported_at_the_mirror(tree: Path) -> None:
    row = (
        "   * - Crash in the shared-memory transport\n     - ``NCCL_SHM_DISABLE=1``\n"
        "     - Containers with a small /dev/shm\n     - Slightly slower\n"
    )
    edit(tree, MGPU, row, "")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1
    hit = assert_finding(findings, "DR103", REF, line_of(tree, REF, "NCCL_SHM_DISABLE=1"))
    assert "NCCL_SHM_DISABLE=1" in hit["message"] and hit["truth"]["path"] == MGPU


def test_a_value_changed_in_the_rst_list_is_reported(tree: Path) -> None:
    edit(tree, MGPU, "``NCCL_P2P_DISABLE=1``", "``NCCL_P2P_DISABLE=0``")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1
    lines = {(f["path"], f["line"]) for f in findings if f["code"].startswith("DR1")}
    assert (REF, line_of(tree, REF, "NCCL_P2P_DISABLE=1")) in lines, findings


def test_an_invented_launcher_flag_in_a_skill_is_reported(tree: Path) -> None:
    edit(tree, SKILL, "--num_gpus 2 --rl_library", "--num_gpus 2 --gpu_watchdog 30 --rl_library")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1
    hit = assert_finding(findings, "DR301", SKILL, line_of(tree, SKILL, "--gpu_watchdog"))
    assert "--gpu_watchdog is not an option of isaaclab train_multigpu" in hit["message"]


def test_the_config_decides_options_and_choices(tree: Path) -> None:
    """``supports_jax`` is off in this config (no --coordinator_address); --rl_library's choices are the
    entry module's MULTI_GPU_BACKENDS, read from the module it imports them from."""
    edit(tree, SKILL, "--rl_library rsl_rl", "--rl_library rl_games --coordinator_address 10.0.0.1:5000")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1
    line = line_of(tree, SKILL, "--coordinator_address")
    assert_finding(findings, "DR303", SKILL, line)
    assert_finding(findings, "DR301", SKILL, line)
    edit(tree, "source/isaaclab/isaaclab/cli/multigpu.py", "supports_jax: bool = False", "supports_jax: bool = True")
    edit(
        tree,
        "source/isaaclab_rl/isaaclab_rl/entrypoints/api.py",
        '("rsl_rl", "skrl")',
        '("rsl_rl", "skrl", "rl_games")',
    )
    assert check(tree, "--no-cache") == (0, [])


# ---------------------------------------------------------------------------------------------
# Isaac Lab 3.0's real launcher source


WHEEL = "isaaclab==3.0.0"
# wheel member -> where Isaac Lab's repository keeps it
FROM_WHEEL = {
    "isaaclab/cli/multigpu.py": "source/isaaclab/isaaclab/cli/multigpu.py",
    "isaaclab_rl/entrypoints/": "source/isaaclab_rl/isaaclab_rl/entrypoints/",
    "isaaclab_physx/app/kit_launcher.py": "source/isaaclab_physx/isaaclab_physx/app/kit_launcher.py",
}


def _from_uv_cache() -> Path | None:
    """The wheel as uv unpacked it into its cache (read only): uv's cache folder as uv reports it here (the
    tests point XDG_CACHE_HOME at a scratch folder), then the user's default one."""
    folders = [Path(os.environ["UV_CACHE_DIR"])] if os.environ.get("UV_CACHE_DIR") else []
    uv = shutil.which("uv")
    if uv is not None:
        got = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=60)
        if got.returncode == 0 and got.stdout.strip():
            folders.append(Path(got.stdout.strip()))
    folders.append(Path.home() / ".cache" / "uv")
    for cache in folders:
        for info in sorted(cache.glob("archive-v*/*/isaaclab-3.0.0.dist-info")):
            if (info.parent / "isaaclab" / "cli" / "multigpu.py").is_file():
                return info.parent
    return None


def _downloaded(dest: Path) -> Path | None:
    """The wheel, downloaded (pip through uv: `uv tool run --from pip pip download`)."""
    uv = shutil.which("uv")
    if uv is None:
        return None
    got = subprocess.run(
        [uv, "tool", "run", "--from", "pip", "pip", "download", WHEEL, "--no-deps", "-d", str(dest), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wheels = sorted(dest.glob("isaaclab-3.0.0-*.whl"))
    if got.returncode != 0 or not wheels:
        return None
    out = dest / "unpacked"
    with zipfile.ZipFile(wheels[0]) as whl:
        for name in whl.namelist():
            if any(name.startswith(member) for member in FROM_WHEEL):
                whl.extract(name, out)
    return out


@pytest.fixture(scope="module")
def real_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("isaaclab_real")
    files = _from_uv_cache() or _downloaded(tmp / "wheel")
    if files is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{WHEEL}: not in uv's cache and its download failed; under CI the registry must be reachable")
        pytest.skip(f"{WHEEL} is not in uv's cache and could not be downloaded (offline?)")
    root = tmp / "IsaacLab"
    for member, where in FROM_WHEEL.items():
        if member.endswith("/"):
            shutil.copytree(files / member, root / where, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (root / where).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files / member, root / where)
    shutil.copytree(FIXTURE / "skills", root / "skills")
    shutil.copytree(FIXTURE / "docs", root / "docs")
    return root


REAL_FLAGS = (
    "--rl_library skrl --num_gpus 2 --nnodes 1 --node_rank 0 --coordinator_address 10.0.0.1:5000 "
    "--master_addr 10.0.0.1 --master_port 29500 --rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29400 "
    "--rdzv_id job1 --max_restarts 0 --monitor_interval 5 --start_method spawn --role trainer --tee 3 "
    "--redirects 3 --local_ranks_filter 0 --log_dir logs --log_all_ranks --dry_run"
)


def _quote(root: Path, command: str) -> None:
    path = root / SKILL
    path.write_text(path.read_text(encoding="utf-8") + f"\n```bash\n{command}\n```\n", encoding="utf-8")


def test_every_real_train_multigpu_flag_passes(real_tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(real_tree, root)
    _quote(root, f"isaaclab train_multigpu {REAL_FLAGS} --task Isaac-Cartpole")
    _quote(root, "isaaclab train_multigpu --nproc_per_node 1 --task Isaac-Cartpole-Direct --num_envs 16 --device cpu")
    _quote(root, "isaaclab train_multigpu --num_gpus 1 --rl_library rsl_rl --task Isaac-Cartpole --max_iterations 5")
    assert check(root, "--no-cache") == (0, [])


@pytest.mark.parametrize(
    "flag, why",
    [
        ("--gpu_watchdog 30", "invented"),
        ("--headless", "not an option of Isaac Lab 3.0 (the Kit launcher reads headless from its settings)"),
        ("--rl_library sb3", "sb3 trains, but not on several GPUs: not one of MULTI_GPU_BACKENDS"),
    ],
)
def test_an_invented_or_removed_flag_is_a_finding(real_tree: Path, tmp_path: Path, flag: str, why: str) -> None:
    root = tmp_path / "tree"
    shutil.copytree(real_tree, root)
    _quote(root, f"isaaclab train_multigpu --num_gpus 2 {flag} --task Isaac-Cartpole")
    rc, findings = check(root, "--no-cache")
    assert rc == 1, why
    (hit,) = findings
    assert hit["path"] == SKILL and hit["line"] == line_of(root, SKILL, flag) and hit["code"] in ("DR301", "DR303")
    assert flag.split()[-1] in hit["message"] or flag.split()[0] in hit["message"]
