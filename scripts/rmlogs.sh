#!/usr/bin/env bash
# Remove old job logs (<runs_dir>/<run>/logs/*.out|*.err) so the runs directory
# does not fill the quota. Only files directly in a run's logs/ directory are
# candidates: checkpoints, ledgers, progress and markers are never touched, nor
# the logs of jobs still in the queue (a requeued job appends to its old log).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [-d DAYS] [-f] [--runs_dir DIR]

Remove job logs (<runs_dir>/<run>/logs/*.out and *.err) last modified more than
DAYS days ago, except those of your jobs still queued or running. Without -f it
only lists what it would remove. Checkpoints and ledgers are never touched.
  -d, --days DAYS   age threshold in days (default 14; 0 = every log)
  -f, --force       really remove
  --runs_dir DIR    runs directory (default: the launcher's, i.e. RUNS_DIR from
                    dotenv/common.env, dotenv/<cluster>.env and .env, else <repo>/runs)
  -h, --help        this help
USAGE
}

# Fills the associative array `active` with the user's queued and running job
# ids, and for array jobs the array's id as well (%A-named logs).
load_active_jobs() {
  local out id array_id
  # A failed squeue must stop us: an empty list would let running jobs' logs go.
  out=$(squeue -h -u "$(hpc_user)" -o '%i %F' 2>&1) || hpc_die "squeue failed: ${out%%$'\n'*}"
  while read -r id array_id; do
    [[ -n $id ]] || continue
    active[$id]=1
    [[ -z $array_id ]] || active[$array_id]=1
  done <<<"$out"
}

# "SIZE PATH" of each .out/.err file older than $2 days directly in <runs_dir>/<run>/logs/,
# NUL-separated, from one find for every run (a thousand runs cost one process, not a
# thousand). Only real logs/ directories: a symlink cannot lead the removal out of the runs
# directory (find does not follow a starting point that is a link), and nothing deeper
# (checkpoints) is looked at.
old_logs() {
  local runs_dir=$1 days=$2 dir
  local -a dirs=()
  for dir in "$runs_dir"/*/logs; do
    [[ -d $dir && ! -L $dir ]] && dirs+=("$dir")
  done
  ((${#dirs[@]})) || return 0
  # shellcheck disable=SC2016  # the single-quoted script is sh's own: $1 and $@ are its arguments
  printf '%s\0' "${dirs[@]}" \
    | xargs -0 sh -c 'minutes=$1; shift; exec find -P "$@" -mindepth 1 -maxdepth 1 -type f \
        \( -name "*.out" -o -name "*.err" \) -mmin "+$minutes" -printf "%s %p\\0"' find-logs "$((days * 1440))" \
    | sort -z -k 2
}

main() {
  local days=14 force=0 runs_dir="" entry path base id size count=0 bytes=0 skipped=0 verb
  local -A active=()
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      -f | --force) force=1 ;;
      -d | --days) hpc_need_value "$1" $# "a whole number of days"; days=$2; shift ;;
      --days=*) days=${1#*=} ;;
      --runs_dir) hpc_need_value "$1" $# "a directory"; runs_dir=$2; shift ;;
      --runs_dir=*) runs_dir=${1#*=} ;;
      *) hpc_usage_error "unknown argument '$1' (accepted: -d DAYS, -f, --runs_dir DIR, -h)" ;;
    esac
    shift
  done
  hpc_check_uint --days "$days" 0 100000
  days=$((10#$days))
  hpc_require_slurm squeue
  runs_dir=$(hpc_runs_dir "$runs_dir")
  [[ -d $runs_dir ]] || hpc_die "runs directory '$runs_dir' does not exist (pass --runs_dir DIR)"
  load_active_jobs

  ((force)) || echo "Would remove (run with -f to remove):"
  # NUL-separated: file names may hold spaces or newlines.
  while IFS= read -r -d '' entry; do
    size=${entry%% *}
    path=${entry#* }
    base=${path##*/}
    base=${base%.*}
    id=${base##*-}  # <run>-<jobid>.out
    if [[ -n $id && -n ${active[$id]:-} ]]; then
      skipped=$((skipped + 1))
      continue
    fi
    if ((force)); then
      rm -f -- "$path"
      printf 'removed %s\n' "$(hpc_printable "$path")"
    else
      printf '  %s\n' "$(hpc_printable "$path")"
    fi
    bytes=$((bytes + size))
    count=$((count + 1))
  done < <(old_logs "$runs_dir" "$days")

  verb="would free"
  ((force == 0)) || verb="freed"
  echo "$count log(s) older than $days day(s) under $runs_dir; $verb $((bytes / 1024)) KiB"
  ((skipped == 0)) || echo "kept $skipped log(s) of jobs still queued or running"
}

main "$@"
