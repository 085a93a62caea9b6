#!/usr/bin/env bash
# Set up this project: a .venv with the launcher, the trainer's frontend and the
# test tools. On a GPU node or a known cluster's login node (or with --backend)
# also the training backend (openpipe-art[backend]) and ART's vLLM runtime, built
# where the cluster's jobs find it. Safe to run again: it only installs what changed.
#
#   bash setup.sh              # frontend + tests (laptops, CI); + backend on GPU nodes and cluster login nodes
#   bash setup.sh --backend    # + GPU training backend and the vLLM runtime, wherever this runs
#   bash setup.sh --no-backend # never the backend
#   bash setup.sh --no-runtime # the backend without building the vLLM runtime (CI: no GPU to serve with)
#   bash setup.sh --ray        # + Ray, for multi-node runs and their tests
#   VENV=DIR bash setup.sh ... # into DIR instead of .venv (CI keeps the backend apart in .venv-backend)
#   bash setup.sh --wheelhouse DIR [--arch x86_64|aarch64] [--have FREEZE]
#                              # download the backend's and the vLLM runtime's wheels for an offline target
#   bash setup.sh --from-wheelhouse DIR  # no index here: .venv, the backend and the runtime from DIR alone
set -euo pipefail
# Every Python this runs (and their children: pip, the wheelhouse) imports nothing from the
# caller's folder: `python -m pip` or `-c 'from hpc...'` would otherwise put it first on the
# import path, and a folder holding pip/__main__.py or hpc/ would run as the user.
export PYTHONSAFEPATH=1

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-$repo/.venv}"
backend=auto
runtime=yes
extras=(frontend test)
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cu128}"

wheelhouse=""       # --wheelhouse DIR: download for a target
from_wheelhouse=""  # --from-wheelhouse DIR: install from it, no index
arch="$(uname -m)"
have=""

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
accepted="--backend, --no-backend, --no-runtime, --ray, --wheelhouse DIR, --arch ARCH, --have FILE, --from-wheelhouse DIR, -h"
value() { [[ -n "${2:-}" && "${2:0:2}" != -- ]] || { echo "setup.sh: $1 needs a value (accepted: $accepted)" >&2; exit 2; }; }

while (($#)); do
  case "$1" in
    --backend) backend=yes ;;
    --no-backend) backend=no ;;
    --no-runtime) runtime=no ;;
    --ray) extras+=(ray) ;;
    --wheelhouse) value "$1" "${2:-}"; wheelhouse="$2"; shift ;;
    --arch) value "$1" "${2:-}"; arch="$2"; shift ;;
    --have) value "$1" "${2:-}"; have="$2"; shift ;;
    --from-wheelhouse) value "$1" "${2:-}"; from_wheelhouse="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown option '$1' (accepted: $accepted)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -n "$have" && ! -f "$have" ]]; then
  echo "setup.sh: --have $have does not exist (accepted: a file of the target's 'pip list --format=freeze')" >&2; exit 2
fi
if [[ -n "$from_wheelhouse" && ! -f "$from_wheelhouse/backend.lock" ]]; then
  echo "setup.sh: --from-wheelhouse $from_wheelhouse is not a wheelhouse (no backend.lock; make one with --wheelhouse)" >&2
  exit 2
fi

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# ART 0.5.19 and later (the releases whose LocalBackend imports without megatron) need Python >= 3.12.
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }

# $PYTHON if set; else Python 3.12 itself (what ART's backend and its vLLM runtime are built for):
# python3.12 on the PATH (a pyenv shim for a version that is not selected fails to run and is
# skipped), pyenv's 3.12 builds; then any newer python3 on the PATH or in pyenv.
find_python() {
  local candidate pyenv="${PYENV_ROOT:-$HOME/.pyenv}/versions"
  if [[ -n "${PYTHON:-}" ]]; then
    new_enough "$PYTHON" && { echo "$PYTHON"; return 0; }
    die "PYTHON=$PYTHON is $("$PYTHON" --version 2>&1 || echo 'not runnable'); Python >= 3.12 is required"
  fi
  # (a pattern that matches nothing stays literal, fails to run and is skipped)
  for candidate in python3.12 "$pyenv"/3.12*/bin/python3 python3 "$pyenv"/3.1[3-9]*/bin/python3; do
    if new_enough "$candidate"; then command -v "$candidate"; return 0; fi
  done
  return 1
}
python=$(find_python) || die "no Python >= 3.12 found (tried python3.13, python3.12, python3 and pyenv). \
On a cluster load one first: TACC 'module load python3/3.12' (see 'module spider python3'), \
JSC 'module load Stages/2025 GCC Python' (Python 3.12); or set PYTHON=/path/to/python3.12"
say "Python: $python ($("$python" --version 2>&1))"

# The jobs' setting of a dotenv variable on this cluster (e.g. ART_VLLM_RUNTIME_CACHE_DIR).
cluster_setting() {
  "$venv/bin/python" -c 'import sys
from hpc.launcher.clusters import load_registry
from hpc.launcher.jobspec import dotenv_setting
print(dotenv_setting(sys.argv[1], load_registry().detect().cluster) or "")' "$1"
}

# Offline (--from-wheelhouse DIR): no index, everything from DIR (made by --wheelhouse on a
# machine with PyPI). The venvs see this Python's packages (a GPU node's torch and its CUDA
# stack) and add what the locks need beside them (hpc/job/wheelhouse.py); the vLLM runtime goes
# where the jobs look for the PyPI build (hpc/job/vllm_runtime.py).
wheelhouse_python() { PYTHONPATH="$repo" "$python" -m hpc.job.wheelhouse "$@"; }
install_from_wheelhouse() {
  local house target bundle
  house="$(cd "$1" && pwd)"
  say "installing from the wheelhouse $house (no package index)"
  wheelhouse_python venv "$venv" || die "could not create $venv"
  wheelhouse_python install "$house" --name backend --python "$venv/bin/python" || die "installing the backend from $house failed"
  "$python" -m pip --python "$venv/bin/python" install --quiet --no-index --no-deps --no-build-isolation -e "$repo" \
    || die "installing this project into $venv failed"
  if [[ "$runtime" != yes ]]; then say "--no-runtime: the vLLM runtime is not built"; return 0; fi
  ART_VLLM_RUNTIME_CACHE_DIR=$(cluster_setting ART_VLLM_RUNTIME_CACHE_DIR) || die "cannot work out ART_VLLM_RUNTIME_CACHE_DIR"
  export ART_VLLM_RUNTIME_CACHE_DIR
  target=$("$venv/bin/python" -m hpc.job.vllm_runtime pypi-dir)
  wheelhouse_python venv "$target/.venv" || die "could not create $target/.venv"
  wheelhouse_python install "$house" --name runtime --python "$target/.venv/bin/python" || die "installing the vLLM runtime failed"
  bundle=$("$venv/bin/python" -c 'from hpc.job.vllm_runtime import find_bundle; print(find_bundle().wheel)') \
    || die "ART's runtime bundle is not in $venv"
  "$python" -m pip --python "$target/.venv/bin/python" install --quiet --no-index --no-deps --force-reinstall "$bundle" \
    || die "installing ART's runtime package failed"
  say "$("$venv/bin/python" -m hpc.job.vllm_runtime shim "$target/.venv/bin/python")"
  say "vLLM runtime: $target/.venv/bin/art-vllm-runtime-server"
}
if [[ -n "$from_wheelhouse" ]]; then
  install_from_wheelhouse "$from_wheelhouse"
  "$venv/bin/python" -c 'import hpc.launch' || die "the launcher does not import"
  say "done (offline, from $from_wheelhouse)"
  exit 0
fi

if [[ -x "$venv/bin/python" ]] && ! new_enough "$venv/bin/python"; then
  say "$venv has $("$venv/bin/python" --version 2>&1); recreating it with Python >= 3.12"
  rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/python" ]]; then
  say "creating virtual environment $venv"
  "$python" -m venv "$venv" || die "could not create $venv (on Debian: apt-get install python3-venv)"
else
  say "using existing virtual environment $venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || say "pip upgrade skipped"

install() {
  local spec
  spec="${repo}[$(IFS=,; echo "$*")]"
  say "installing $spec (editable)"
  "$venv/bin/python" -m pip install --quiet -e "$spec" || die "pip install of $spec failed (see the messages above)"
}

# The backend goes where jobs will need it: on a GPU node, and on the login node of
# a known cluster (its jobs run from this .venv on the shared filesystem).
if [[ "$backend" == auto ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    backend=yes; say "GPU found (nvidia-smi): installing the training backend too"
  else
    install "${extras[@]}"
    cluster=$("$venv/bin/python" -c 'from hpc.launcher.clusters import load_registry; print(load_registry().detect().cluster.name)') \
      || die "could not detect the cluster (see above)"
    if [[ "$cluster" != local ]]; then
      backend=yes; say "this is $cluster (its jobs run from this .venv): installing the training backend too"
    else
      backend=no; say "no GPU and no known cluster: the frontend only (use --backend to force the backend)"
    fi
  fi
fi
# Does this machine reach a URL? (login nodes do; CI and some sites reach only PyPI)
reachable() { "$venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1" >/dev/null 2>&1; }

# The torch release ART's [backend] extra pins (without its +cu128 label), and uv's overrides
# for PyPI's torch in place of that pin (hpc/job/vllm_runtime.py).
art_torch_pin() { "$venv/bin/python" -m hpc.job.vllm_runtime art-torch-pin; }
torch_overrides() { "$venv/bin/python" -m hpc.job.vllm_runtime torch-overrides; }

# ART's [backend] extra pins torch==<X>+cu128, a build only PyTorch's own index serves,
# which pip's resolver cannot combine with PyPI; uv installs it from that index where this
# machine reaches it, else with PyPI's torch==<X> in its place (a uv override: the same
# version, PyPI's CUDA build). Always the ART the frontend has: never another release.
install_backend() {
  local art_version torch_pin override spec
  "$venv/bin/python" -m pip install --quiet uv || die "pip install uv failed"
  art_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("openpipe-art"))')
  torch_pin=$(art_torch_pin)
  spec="${repo}[$(IFS=,; echo "${extras[*]}"),backend]"
  if reachable "$TORCH_INDEX/torch/"; then
    say "installing openpipe-art[backend]==$art_version with torch==$torch_pin+cu128 from PyTorch's index ($TORCH_INDEX)"
    "$venv/bin/uv" pip install --quiet -p "$venv/bin/python" --extra-index-url "$TORCH_INDEX" \
      --index-strategy unsafe-best-match -e "$spec" "openpipe-art[backend]==$art_version" \
      || die "installing the backend from PyTorch's index failed (see above)"
  else
    override="$venv/torch-override.txt"
    torch_overrides > "$override" || die "cannot read ART's torch pins"
    say "PyTorch's index ($TORCH_INDEX) is not reachable from here: installing openpipe-art[backend]==$art_version"
    say "with PyPI's $(paste -sd' ' "$override") in place of torch==$torch_pin+cu128 (uv --override $override)"
    "$venv/bin/uv" pip install --quiet -p "$venv/bin/python" --override "$override" \
      -e "$spec" "openpipe-art[backend]==$art_version" || die "installing the backend failed (see above)"
  fi
}


# ART's LocalBackend serves rollouts from a vLLM runtime in a virtual environment of its
# own. Build it here (a login node has internet; compute nodes may not), where the jobs
# look: ART_VLLM_RUNTIME_CACHE_DIR of the cluster's dotenv, on the shared filesystem.
# ART's own build takes torch from PyTorch's index and an x86_64 vLLM wheel from GitHub;
# elsewhere (aarch64: Vista, JUPITER; or no PyTorch index) the same pinned versions come
# from PyPI (hpc/job/vllm_runtime.py), into <cache>/pypi-<arch>, where the trainer finds it.
build_runtime() {
  local cache target reqs server
  if [[ -n "${ART_VLLM_RUNTIME_BIN:-}" ]]; then
    say "ART_VLLM_RUNTIME_BIN is set: ART will use that vLLM runtime server"; return 0
  fi
  cache=$(cluster_setting ART_VLLM_RUNTIME_CACHE_DIR) || die "cannot work out ART_VLLM_RUNTIME_CACHE_DIR (see above)"
  export ART_VLLM_RUNTIME_CACHE_DIR="$cache"
  if [[ "$(uname -m)" == x86_64 ]] && reachable "$TORCH_INDEX/torch/" && reachable https://github.com; then
    say "building ART's managed vLLM runtime in $cache (downloads vLLM, several GB)"
    server=$(PATH="$venv/bin:$PATH" "$venv/bin/python" -c \
      'from art.vllm_runtime import ensure_vllm_runtime; print(ensure_vllm_runtime())' | tail -n 1) \
      || die "could not build ART's vLLM runtime (see above), or set ART_VLLM_RUNTIME_BIN to a vLLM runtime server"
    say "$("$venv/bin/python" -m hpc.job.vllm_runtime shim "$(dirname "$server")/python")"
    say "vLLM runtime: $server"
    return 0
  fi
  target=$("$venv/bin/python" -m hpc.job.vllm_runtime pypi-dir)
  reqs="$target/requirements"
  say "building the vLLM runtime from PyPI in $target ($(uname -m); ART's pinned versions, several GB)"
  "$venv/bin/python" -m hpc.job.vllm_runtime requirements "$reqs" >/dev/null || die "cannot read ART's runtime bundle"
  "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' \
    || die "ART's vLLM runtime needs Python 3.12 exactly; $python is $("$python" --version 2>&1) (set PYTHON)"
  "$venv/bin/uv" venv --quiet --allow-existing -p "$python" "$target/.venv" || die "could not create $target/.venv"
  "$venv/bin/uv" pip install --quiet -p "$target/.venv/bin/python" --override "$reqs/overrides.txt" \
    -r "$reqs/requirements.txt" || die "could not install the vLLM runtime from PyPI (see above)"
  say "$("$venv/bin/python" -m hpc.job.vllm_runtime shim "$target/.venv/bin/python")"
  say "vLLM runtime: $target/.venv/bin/art-vllm-runtime-server"
}

# --wheelhouse DIR: the backend's and ART's vLLM runtime's wheels for an offline target, each
# set locked for it (python 3.12 on --arch, wheels only) and cut to what --have says it lacks
# (hpc/job/wheelhouse.py writes the sets as --backend installs them, into DIR/requirements).
download_wheelhouse() {
  local house="$1" args=(--arch "$arch" --uv "$venv/bin/uv" --repo "$repo")
  mkdir -p "$house" && house="$(cd "$house" && pwd)"
  [[ -z "$have" ]] || args+=(--have "$have")
  "$venv/bin/python" -m hpc.job.wheelhouse download "$house" "${args[@]}" || die "the wheelhouse could not be made (see above)"
  say "wheelhouse for $arch: $house ($(du -sh "$house/wheels" | cut -f1)); on the target: bash setup.sh --from-wheelhouse DIR"
}
if [[ -n "$wheelhouse" ]]; then
  [[ -n "${cluster:-}" ]] || install "${extras[@]}"
  download_wheelhouse "$wheelhouse"
  exit 0
fi

if [[ "$backend" == yes ]]; then
  [[ -n "${cluster:-}" ]] || install "${extras[@]}"
  install_backend
  if [[ "$runtime" == yes ]]; then build_runtime; else say "--no-runtime: the vLLM runtime is not built"; fi
elif [[ -z "${cluster:-}" ]]; then  # not installed by the detection above
  install "${extras[@]}"
fi

if [[ ! -f "$repo/.env" ]]; then
  say "no .env yet: copy .env.example to .env and fill in your keys (it stays out of git)"
fi

say "checking the launcher imports"
"$venv/bin/python" -c 'import hpc.launch' || die "the launcher does not import"
say "done. Next: source $venv/bin/activate && python -m hpc.launch --job_name agent_008 --time_limit 48:00:00 --dry_run"
