#!/usr/bin/env bash
# Cancel this user's jobs (never anyone else's), optionally only those whose
# name starts with a prefix. Lists them and asks first unless -y.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--name PREFIX | --sweep NAME] [-y]

Cancel your queued and running jobs (only yours, even as root or an operator).
Lists what it will cancel and asks for confirmation first.
  --name PREFIX   only jobs whose name starts with PREFIX (case-sensitive)
  --sweep NAME    every job of the sweep NAME (its runs' and its pack jobs', all
                  named NAME.<...>); launch the sweep again to resume it
  -y, --yes       do not ask
  -h, --help      this help
USAGE
}

# Fills the arrays ids and lines with the user's jobs whose name starts with
# $2. Fields end in \x1f and records in \x1e, so a name holding '|', spaces or
# even a newline stays one field of one record.
list_jobs() {
  local user=$1 prefix=$2 out id state name
  out=$(squeue -h -u "$user" -o $'%i\x1f%T\x1f%j\x1e' 2>&1) || hpc_die "squeue failed: ${out%%$'\n'*}"
  while IFS=$'\x1f' read -r -d $'\x1e' id state name; do
    id=${id#$'\n'}  # squeue ends each record with \x1e and a newline
    [[ -n $id && $name == "$prefix"* ]] || continue
    ids+=("$id")
    lines+=("$(printf '%-12s %-11s %s' "$id" "$state" "$(hpc_printable "$name")")")
  done <<<"$out"
}

# scancel -u as well as the ids: Slurm then refuses any id that is not ours,
# even if it was reused since the listing. A job that ended since the listing
# is not an error.
cancel_jobs() {
  local user=$1 err
  shift
  if ! err=$(scancel -u "$user" "$@" 2>&1); then
    err=$(grep -v -e 'Invalid job id specified' -e 'already completing or completed' <<<"$err" || true)
    [[ -z $err ]] || hpc_die "scancel: ${err%%$'\n'*}"
  fi
}

main() {
  hpc_remote_intercept usage "$@"  # --remote DEST: on a cluster's login node instead (docs/remote.md)
  local prefix="" yes=0 user answer which=""
  local -a ids=() lines=()
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      -y | --yes) yes=1 ;;
      --name) hpc_need_value "$1" $# "a job-name prefix"; prefix=$2; hpc_check_prefix "$1" "$prefix"; shift ;;
      --name=*) prefix=${1#*=}; hpc_check_prefix --name "$prefix" ;;
      --sweep) hpc_need_value "$1" $# "a sweep name"; hpc_check_prefix "$1" "$2"; prefix="$2."; shift ;;
      --sweep=*) hpc_check_prefix --sweep "${1#*=}"; prefix="${1#*=}." ;;
      *) hpc_usage_error "unknown argument '$1' (accepted: --name PREFIX, --sweep NAME, -y, -h)" ;;
    esac
    shift
  done
  hpc_require_slurm squeue scancel
  user=$(hpc_user)
  list_jobs "$user" "$prefix"

  [[ -z $prefix ]] || which=" whose name starts with '$(hpc_printable "$prefix")'"
  if ((${#ids[@]} == 0)); then
    echo "no jobs of $user$which to cancel"
    return 0
  fi
  echo "${#ids[@]} job(s) of $user$which to cancel:"
  printf '  %s\n' "${lines[@]}"
  if ((yes == 0)); then
    read -r -p "Cancel them? [y/N] " answer || answer=""
    [[ $answer =~ ^[Yy]([Ee][Ss])?$ ]] || { echo "nothing cancelled"; exit 1; }
  fi
  cancel_jobs "$user" "${ids[@]}"
  echo "cancelled ${#ids[@]} job(s)"
}

main "$@"
