#!/usr/bin/env bash
# Shared functions for the job monitoring helpers (status.sh, sfail.sh,
# scompleted.sh, scancelled.sh, scancelall.sh, rmlogs.sh).
#
# Sourced two ways:
#   * by the helpers, which set `set -euo pipefail` themselves first;
#   * by a user's shell (`source scripts/common.sh`), which gets short aliases:
#       hstatus  sfail  scompleted  scancelled  scancelall  rmlogs  localslurm
#     Nothing here changes the options of the shell that sources it, and the
#     functions that exit are only called from the helpers.
#
# The reports (tables, run directories, log paths) are the package's hpc.run.monitor;
# the helpers parse options, check that Slurm is there, and call it.

HPC_SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HPC_REPO_DIR=$(dirname "$HPC_SCRIPTS_DIR")

# Single quotes: expanded when used, so they work from any directory.
alias hstatus='bash "$HPC_SCRIPTS_DIR/status.sh"'
alias sfail='bash "$HPC_SCRIPTS_DIR/sfail.sh"'
alias scompleted='bash "$HPC_SCRIPTS_DIR/scompleted.sh"'
alias scancelled='bash "$HPC_SCRIPTS_DIR/scancelled.sh"'
alias scancelall='bash "$HPC_SCRIPTS_DIR/scancelall.sh"'
alias rmlogs='bash "$HPC_SCRIPTS_DIR/rmlogs.sh"'
alias localslurm='bash "$HPC_SCRIPTS_DIR/local_slurm.sh"'

# --- messages and argument checks ---------------------------------------------

hpc_prog() { basename "${0:-hpc}"; }

# Runtime failure: one line on stderr, exit 1.
hpc_die() {
  echo "$(hpc_prog): error: $*" >&2
  exit 1
}

# Bad usage: one line naming the bad value and what is accepted, exit 2.
hpc_usage_error() {
  echo "$(hpc_prog): $*" >&2
  exit 2
}

# An option's value must follow it: hpc_need_value OPTION "$#" "what is accepted"
hpc_need_value() {
  local option=$1 count=$2 accepted=$3
  ((count >= 2)) || hpc_usage_error "$option needs a value ($accepted)"
}

# A whole number in [min, max]: hpc_check_uint OPTION VALUE MIN [MAX]
hpc_check_uint() {
  local option=$1 value=$2 min=$3 max=${4:-1000000}
  # At most 9 digits before arithmetic, so a huge value cannot overflow into range.
  if ! [[ $value =~ ^[0-9]{1,9}$ ]] || ((10#$value < min || 10#$value > max)); then
    hpc_usage_error "bad $option '$value' (accepted: a whole number from $min to $max)"
  fi
}

# A job-name prefix must not be empty: `--name "$UNSET"` would select every job.
hpc_check_prefix() {
  [[ -n $2 ]] || hpc_usage_error "bad $1 '' (accepted: a non-empty job-name prefix)"
}

# The account Slurm knows us by (munge authenticates the uid, not $USER, which
# `su` can leave pointing at someone else).
hpc_user() { id -un; }

# Job names and paths on the terminal: control characters (newline, ESC) as '?'.
hpc_printable() { printf '%s' "${1//[[:cntrl:]]/?}"; }

# --- Slurm and accounting -----------------------------------------------------

# Every Slurm command a helper uses must exist; say which one does not.
hpc_require_slurm() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 \
      || hpc_die "'$tool' not found: the Slurm client commands are not installed or not on PATH (locally: bash scripts/local_slurm.sh up)"
  done
}

# sacct gives real records only when slurmdbd accounting is configured; without
# it, it says "Slurm accounting storage is disabled" (with exit 0 or 1).
hpc_require_accounting() {
  local out rc=0
  hpc_require_slurm sacct
  out=$(sacct -n -X -S now -E now -o JobID 2>&1) || rc=$?
  out=${out#sacct: }
  if [[ $out == *"accounting storage is disabled"* ]]; then
    hpc_die "Slurm accounting is not available (sacct: ${out%%$'\n'*}); this view needs slurmdbd"
  elif ((rc != 0)); then
    # A sacct that fails for a moment (slurmdbd busy or failing over) is no proof there is no accounting.
    hpc_die "sacct did not answer (${out%%$'\n'*}): Slurm's accounting is unknown for now; try again in a minute"
  fi
}

# --- the report program ---------------------------------------------------------

# The repo's venv python (it has what hpc/ imports), else python3.
hpc_python() {
  if [[ -x $HPC_REPO_DIR/.venv/bin/python ]]; then
    echo "$HPC_REPO_DIR/.venv/bin/python"
  elif command -v python3 >/dev/null 2>&1; then
    echo python3
  else
    hpc_die "python3 not found (run setup.sh, or put python3 on PATH)"
  fi
}

# hpc_monitor COMMAND ARGS...: run python -m hpc.run.monitor, which names this helper in
# its messages. It runs from the repository's root with -E -s (no PYTHONPATH, no user site):
# this repository's package is what is imported, and no module in the user's working
# directory can shadow one; HPC_CALLER_DIR takes it back there for relative paths.
hpc_monitor() {
  local python prog here=$PWD
  python=$(hpc_python) || exit 1
  prog=$(hpc_prog)
  (cd "$HPC_REPO_DIR" && HPC_PROG=$prog HPC_CALLER_DIR=$here exec "$python" -E -s -m hpc.run.monitor "$@")
}

# --- --remote DEST: the helper on a cluster's login node, over SSH ----------------

# First in a helper's main: hpc_remote_intercept USAGE_FN "$@". With --remote among the
# arguments, the helper runs on that login node instead (python -m hpc.remote run: the
# same hook as the Python commands', hpc/remote/) and this exits with its exit code; with
# -h, the remote flags follow the helper's usage. Otherwise it returns. PYTHONSAFEPATH=1:
# `python -m` would put the caller's folder first on the import path, and a folder holding
# hpc/remote/__main__.py would run as the user; the repository comes from PYTHONPATH alone.
hpc_remote_intercept() {
  local usage_fn=$1 arg python help=0
  shift
  for arg in "$@"; do
    case $arg in
      --remote | --remote=*)
        python=$(hpc_python) || exit 1
        PYTHONSAFEPATH=1 PYTHONPATH="$HPC_REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" \
          exec "$python" -m hpc.remote run "scripts/$(hpc_prog)" "$@" ;;
      -h | --help) help=1 ;;
    esac
  done
  if ((help)); then
    "$usage_fn"
    python=$(hpc_python) || exit 1
    PYTHONSAFEPATH=1 PYTHONPATH="$HPC_REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" "$python" -m hpc.remote help
    exit 0
  fi
}

# --- run directories ----------------------------------------------------------

# --runs_dir DIR if given, else the launcher's own default, worked out by the
# launcher's code: RUNS_DIR from the merged dotenv of this cluster
# (dotenv/common.env, dotenv/<cluster>.env, .env), else <repo>/runs.
# A given one that is there but no folder is refused (one not there yet has no runs).
hpc_runs_dir() {
  local given=${1:-}
  if [[ -n $given ]]; then
    if [[ -e $given && ! -d $given ]]; then
      hpc_usage_error "bad --runs_dir '$(hpc_printable "$given")': not a directory (accepted: a directory of runs)"
    fi
    echo "$given"
  else
    hpc_monitor runs-dir || exit 1
  fi
}

# --- sfail.sh / scompleted.sh / scancelled.sh -----------------------------------

# The shared body of the sacct views.
#   hpc_sacct_main LABEL STATES TAIL_LINES USAGE_FN [args...]
# STATES: sacct's -s list; TAIL_LINES: error-log lines per job, -1 for a view
# without the -n option.
hpc_sacct_main() {
  local label=$1 states=$2 tail_lines=$3 usage_fn=$4
  shift 4
  local start=now-7days runs_dir="" prefix="" accepted="-S TIME, --name PREFIX, --runs_dir DIR, -h"
  ((tail_lines < 0)) || accepted="-S TIME, -n LINES, --name PREFIX, --runs_dir DIR, -h"
  while (($#)); do
    case $1 in
      -h | --help) "$usage_fn"; exit 0 ;;
      -S | --starttime) hpc_need_value "$1" $# "a time sacct accepts, e.g. now-3days or 2026-11-01"; start=$2; shift ;;
      --starttime=*) start=${1#*=} ;;
      --runs_dir) hpc_need_value "$1" $# "a directory"; runs_dir=$2; shift ;;
      --runs_dir=*) runs_dir=${1#*=} ;;
      --name) hpc_need_value "$1" $# "a job-name prefix"; prefix=$2; hpc_check_prefix "$1" "$prefix"; shift ;;
      --name=*) prefix=${1#*=}; hpc_check_prefix --name "$prefix" ;;
      -n | --lines)
        ((tail_lines >= 0)) || hpc_usage_error "unknown argument '$1' (accepted: $accepted)"
        hpc_need_value "$1" $# "a whole number"; hpc_check_uint "$1" "$2" 0 10000; tail_lines=$((10#$2)); shift ;;
      *) hpc_usage_error "unknown argument '$1' (accepted: $accepted)" ;;
    esac
    shift
  done
  [[ -n $start ]] || hpc_usage_error "bad -S '' (accepted: a time sacct accepts, e.g. now-3days or 2026-11-01)"
  hpc_require_slurm sacct scontrol
  hpc_require_accounting
  runs_dir=$(hpc_runs_dir "$runs_dir")
  hpc_monitor ended "$label" "$states" "$start" "$(hpc_user)" "$runs_dir" "$prefix" "$((tail_lines < 0 ? 0 : tail_lines))"
}
