#!/usr/bin/env bash
# The real Isaac Lab 3.0 beside this project, for the `isaaclab` e2e tests (tests/test_isaaclab_real_e2e.py):
#   bash tests/isaaclab_real/setup_env.sh
# makes (or brings up to date) a Python 3.12 venv at .isaaclab-venv/ (gitignored; MGPU_ISAACLAB_VENV overrides)
# holding isaaclab==3.0.0 and this project, without replacing Isaac Lab's own `isaaclab` console script.
# Idempotent: a second run checks and returns in seconds. Measured on 2 cores: uv's cache cold 2 min 37 s (the
# wheels downloaded, a 7.6 GB venv); cache warm into a new venv (a fresh clone, as in CI), the Warp warm-up included,
# 119 CPU-s in 130 s alone (168 CPU-s in 144 s when the install compiled every file's bytecode); a rerun 1 s.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${MGPU_ISAACLAB_VENV:-$repo/.isaaclab-venv}"
export PATH="$HOME/.local/bin:$PATH"
isaaclab_version="3.0.0"

# Isaac Lab 3.0 requires Python >=3.12,<3.13: MGPU_ISAACLAB_PYTHON, else a 3.12 uv finds on the machine (PATH,
# its own), else pyenv's, else "3.12" (uv downloads one where its download host is reachable).
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  python312="${MGPU_ISAACLAB_PYTHON:-}"
  if [ -z "$python312" ]; then
    python312="$(uv python find --no-python-downloads 3.12 2>/dev/null || true)"
  fi
  if [ -z "$python312" ]; then
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
      [ -x "$candidate" ] && python312="$candidate"
    done
  fi
  uv venv --quiet --allow-existing --python "${python312:-3.12}" "$venv"
fi
py="$venv/bin/python"

# No --compile-bytecode: the Warp warm-up below imports what the tests' Isaac Lab processes import, and writes the
# bytecode of just those modules (a quarter of the venv's); compiling every file took about 2 CPU-minutes.
uv pip install --quiet --python "$py" "isaaclab==$isaaclab_version"

# This project: its source on the venv's path. While pyproject.toml names our console script `isaaclab`, an
# install would replace Isaac Lab's script of that name, so only a .pth file puts src/ on the path; once the
# console script has its own name, an editable install without dependencies adds it beside Isaac Lab's.
if grep -Eq '^isaaclab[[:space:]]*=' "$repo/pyproject.toml"; then
  site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  printf '%s\n' "$repo/src" > "$site/mgpu_lab_src.pth"
else
  site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  rm -f "$site/mgpu_lab_src.pth"
  # skipped when this checkout is already installed editable with every console script pyproject.toml names
  if ! "$py" - "$repo" "$venv/bin" <<'PY'
import importlib.metadata as md, json, os, sys, tomllib
repo, bin_dir = sys.argv[1], sys.argv[2]
try:
    url = json.loads(md.distribution("mgpu-lab").read_text("direct_url.json") or "{}")
except md.PackageNotFoundError:
    sys.exit(1)
with open(os.path.join(repo, "pyproject.toml"), "rb") as f:
    scripts = tomllib.load(f)["project"].get("scripts", {})
ok = url.get("url") == "file://" + repo and url.get("dir_info", {}).get("editable")
sys.exit(0 if ok and all(os.path.isfile(os.path.join(bin_dir, s)) for s in scripts) else 1)
PY
  then
    uv pip install --quiet --python "$py" --no-deps -e "$repo"
  fi
fi
# Our runtime's dependencies that Isaac Lab does not bring (torch, numpy and gymnasium are Isaac Lab's pins).
uv pip install --quiet --python "$py" --compile-bytecode "click>=8.1" "ClusterShell>=1.9"

# Isaac Lab's console script must still be Isaac Lab's.
if ! grep -q '^from isaaclab\.' "$venv/bin/isaaclab"; then
  echo "setup_env: $venv/bin/isaaclab is not Isaac Lab's console script any more" >&2
  exit 1
fi

# Warp's CPU kernels for the tests' Cartpole, compiled once into the venv's own folder ($venv/warp-cache): the tests
# copy it into their session's cache (tests/mgpu_testing/isaaclab_real.py), so each test file no longer compiles them
# (measured on 2 cores under load: Isaac Lab's `isaaclab train` 217 s cold, 27 s warm; the per-rank trainer under the
# launcher 78 s, 41 s warm). Two short trainings, about 2.5 CPU-minutes, once per venv (the stamp names the version).
# Warp checks each kernel's hash itself, so a stale cache only costs a compile; a failure here is a warning (the tests
# then compile, and report what fails).
warp_cache="$venv/warp-cache"
stamp="$warp_cache/.warmed-isaaclab-$isaaclab_version"
if [ ! -f "$stamp" ]; then
  echo "setup_env: compiling Warp's CPU kernels for Isaac-Cartpole-Direct into $warp_cache (minutes, once)"
  scratch="$(mktemp -d)"
  if (
    set -e
    "$py" "$repo/tests/isaaclab_real/build_assets.py" "$scratch/assets" > /dev/null
    mkdir "$scratch/theirs" "$scratch/ours"
    export ISAACSIM_ASSET_ROOT="$scratch/assets" WARP_CACHE_PATH="$warp_cache" OMP_NUM_THREADS=1 \
      CUDA_VISIBLE_DEVICES="" MASTER_ADDR=127.0.0.1 GLOO_SOCKET_IFNAME=lo TMPDIR="$scratch"
    # ...and the bytecode of every module these trainings import, into the venv: where PYTHONDONTWRITEBYTECODE is
    # set (CI) each of the tests' Isaac Lab processes would otherwise compile them again
    export PYTHONDONTWRITEBYTECODE=
    cartpole=(--rl_library rsl_rl --task Isaac-Cartpole-Direct --num_envs 16 presets=newton_mjwarp --max_iterations 1)
    cd "$scratch/theirs"
    "$venv/bin/isaaclab" train "${cartpole[@]}" --device cpu agent.device=cpu > "$scratch/theirs.log" 2>&1
    cd "$scratch/ours"
    "$py" -m mgpu_lab.cli train_multigpu --num_gpus 1 --device cpu -m isaaclab_rl.entrypoints.multigpu \
      "${cartpole[@]}" agent.device=cpu > "$scratch/ours.log" 2>&1
  ); then
    touch "$stamp"
  else
    echo "setup_env: warning: Warp's kernels were not compiled ahead (the tests will compile them); the end of its log:" >&2
    tail -n 20 "$scratch"/*.log >&2 2>/dev/null || true
  fi
  rm -rf "$scratch"
fi
echo "setup_env: $venv ready (isaaclab $isaaclab_version; this project from $repo/src)"
