#!/usr/bin/env bash
# Set up this project: a .venv with the launcher, the trainer's frontend and the
# test tools. On a GPU node (or with --backend) also the training backend
# (openpipe-art[backend], and ART's own vLLM runtime). Safe to run again: it only
# installs what changed.
#
#   bash setup.sh              # frontend + tests (login nodes, laptops, CI)
#   bash setup.sh --backend    # + GPU training backend (on the login node of a cluster whose compute nodes are offline)
#   bash setup.sh --no-backend # never the backend, even on a GPU node
#   bash setup.sh --ray        # + Ray, for multi-node runs and their tests
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-$repo/.venv}"
backend=auto
extras=(frontend test)

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }

for arg in "$@"; do
  case "$arg" in
    --backend) backend=yes ;;
    --no-backend) backend=no ;;
    --ray) extras+=(ray) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (accepted: --backend, --no-backend, --ray, -h)" >&2; exit 2 ;;
  esac
done

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
    cluster=$("$venv/bin/python" -c 'from hpc.clusters import load_registry; print(load_registry().detect().cluster.name)') \
      || die "could not detect the cluster (see above)"
    if [[ "$cluster" != local ]]; then
      backend=yes; say "this is $cluster (its jobs run from this .venv): installing the training backend too"
    else
      backend=no; say "no GPU and no known cluster: the frontend only (use --backend to force the backend)"
    fi
  fi
fi
if [[ "$backend" == yes ]]; then
  install "${extras[@]}" backend
elif [[ -z "${cluster:-}" ]]; then  # not installed by the detection above
  install "${extras[@]}"
fi

if [[ "$backend" == yes ]]; then
  if [[ -n "${ART_VLLM_RUNTIME_BIN:-}" ]]; then
    say "ART_VLLM_RUNTIME_BIN is set: ART will use that vLLM runtime server"
  elif [[ "$(uname -m)" != x86_64 ]]; then
    # ART 0.5.18's runtime lockfile pins an x86_64 vLLM wheel.
    say "WARNING: ART's bundled vLLM runtime is built for x86_64 only; on $(uname -m) (Vista, JUPITER) build a"
    say "WARNING: vLLM runtime server yourself and set ART_VLLM_RUNTIME_BIN in .env before training (docs/design.md)"
  else
    # ART's LocalBackend serves rollouts from a vLLM runtime in a virtual environment
    # of its own; building it downloads vLLM, so do it here (a login node has internet;
    # compute nodes may not) rather than in the first job. ~/.cache is shared with them.
    say "building ART's managed vLLM runtime (~/.cache/art/vllm_runtime; downloads vLLM, several GB)"
    PATH="$venv/bin:$PATH" "$venv/bin/python" -c \
      'from art.vllm_runtime import ensure_vllm_runtime; print("[setup] vLLM runtime:", ensure_vllm_runtime())' \
      || die "could not build ART's vLLM runtime (see above; it needs internet), or set ART_VLLM_RUNTIME_BIN to a vLLM runtime server"
  fi
fi

if [[ ! -f "$repo/.env" ]]; then
  say "no .env yet: copy .env.example to .env and fill in your keys (it stays out of git)"
fi

say "checking the launcher imports"
"$venv/bin/python" -c 'import hpc.launch' || die "the launcher does not import"
say "done. Next: source $venv/bin/activate && python -m hpc.launch --job_name agent_008 --time_limit 48:00:00 --dry_run"
