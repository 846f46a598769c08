#!/usr/bin/env bash
# The real Isaac Lab 3.0 beside this project, for the `isaaclab` e2e tests (tests/test_isaaclab_real_e2e.py):
#   bash tests/isaaclab_real/setup_env.sh
# makes (or brings up to date) a Python 3.12 venv at .isaaclab-venv/ (gitignored; MGPU_ISAACLAB_VENV overrides)
# holding isaaclab==3.0.0 and this project, without replacing Isaac Lab's own `isaaclab` console script.
# Idempotent: a second run checks and returns in seconds. Measured on 2 cores: uv's cache cold 2 min 37 s (the
# wheels downloaded, a 7.6 GB venv); cache warm into a new venv (a fresh clone, as in CI) 1 min 56 s of CPU, nearly all
# of it compiling bytecode (9 min wall on a machine loaded by other jobs); a rerun 1 s (6 s loaded).
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

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (CI) every rank would otherwise compile torch again.
uv pip install --quiet --python "$py" --compile-bytecode "isaaclab==$isaaclab_version"

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
echo "setup_env: $venv ready (isaaclab $isaaclab_version; this project from $repo/src)"
