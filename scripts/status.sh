#!/usr/bin/env bash
# One screen for "how are my runs doing": the user's queued and running jobs,
# then one line per run directory (latest job and its state, step/total from
# progress.json, latest complete checkpoint, reward, ETA, GPU-hours,
# continuations, finished/failed/stalled/collapsed), and each run's goodput.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--run NAME] [--watch SECONDS [--count N]] [--runs_dir DIR]

Your queued and running jobs (state, reason, elapsed/limit, nodes), and below
them one line per run under the runs directory:
  JOB     the run's running job, else its latest one, and STATE its state
  STEP    training step/total from the trainer's progress.json
  CKPT    latest complete checkpoint: the step the next job resumes from
  REWARD  reward mean of the latest step
  VAL     latest validation accuracy @ its step, and the best step (kept when pruning)
  ETA     from the trainer's estimate
  GPU-H   GPU-hours charged so far (elapsed x GPUs allocated, or x the node's
          GPUs where the cluster charges whole nodes; sacct's records)
  CONT    continuations so far (requeues + resubmissions)
  RESULT  finished, failed: <reason>, cancelled (scancel'ed; launch again to
          resume), - while training, or a health flag while training:
          STALLED    the job is RUNNING but made no step in HPC_STALL_FACTOR (3)
                     x its usual step time (at least HPC_STALL_MIN, 60 s; from
                     its start, HPC_STALL_STARTUP (1800 s) more for start-up)
          COLLAPSED  the reward spread within every group was at most
                     HPC_COLLAPSE_SPREAD (0.01) for the last HPC_COLLAPSE_STEPS
                     (10) steps: GRPO learns (almost) nothing
Under the table, one line per run that has had a job: goodput (training step
time / allocated time), GPU-hours charged and lost (start-up, validation,
abandoned work, idle), GPU-hours per step and to finish.
The breakdown per job: .venv/bin/python -m hpc.accounting RUN
One squeue and at most one sacct call; a run unchanged since the last call, its jobs
ended, is shown from your cache folder (docs/watching.md: what status reads).

  --run NAME        only this run (a directory under the runs directory) and its jobs,
                    or every run of the sweep NAME (runs of a sweep are listed together)
  --watch SECONDS   refresh every SECONDS until interrupted (Ctrl-C)
  --count N         with --watch: stop after N screens
  --runs_dir DIR    runs directory (default: the launcher's, i.e. RUNS_DIR from
                    dotenv/common.env, dotenv/<cluster>.env and .env, else <repo>/runs)
  -h, --help        this help
USAGE
}

# The queue, a blank line, the runs: one squeue and at most one sacct call. A Slurm that does
# not answer is marked in the table and named on stderr (exit 1); the runs are still shown.
show_once() {
  local runs_dir=$1 run=$2
  hpc_monitor status "$(hpc_user)" "$runs_dir" ${run:+"$run"}
}

# Refresh every $every seconds; $count screens (0 = until interrupted). A failed
# refresh shows its error and the next one tries again: a busy controller must
# not end a watch that runs all day.
watch_loop() {
  local runs_dir=$1 run=$2 every=$3 count=$4 screens=0 screen
  while true; do
    # Build the screen first, then clear and print, so it does not flicker.
    screen=$(show_once "$runs_dir" "$run" 2>&1) || true
    if [[ -t 1 ]]; then
      printf '\033[H\033[2J'
    elif ((screens > 0)); then
      echo  # not a terminal (a file, a pipe): screens one after the other
    fi
    printf '%s\n(every %ss; Ctrl-C to stop)\n' "$screen" "$every"
    screens=$((screens + 1))
    ((count == 0 || screens < count)) || return 0
    sleep "$every"
  done
}

main() {
  hpc_remote_intercept usage "$@"  # --remote DEST: on a cluster's login node instead (docs/remote.md)
  local run="" run_given=0 watch="" count="" runs_dir=""
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      --run) hpc_need_value "$1" $# "a run name"; run=$2; run_given=1; shift ;;
      --run=*) run=${1#*=}; run_given=1 ;;
      --watch) hpc_need_value "$1" $# "seconds between refreshes"; watch=$2; shift ;;
      --watch=*) watch=${1#*=} ;;
      --count) hpc_need_value "$1" $# "a number of screens"; count=$2; shift ;;
      --count=*) count=${1#*=} ;;
      --runs_dir) hpc_need_value "$1" $# "a directory"; runs_dir=$2; shift ;;
      --runs_dir=*) runs_dir=${1#*=} ;;
      *) hpc_usage_error "unknown argument '$1' (accepted: --run NAME, --watch SECONDS, --count N, --runs_dir DIR, -h)" ;;
    esac
    shift
  done
  if ((run_given)) && [[ -z $run || $run == */* || $run == . || $run == .. ]]; then
    hpc_usage_error "bad --run '$(hpc_printable "$run")' (accepted: the name of a run directory)"
  fi
  [[ -z $watch ]] || hpc_check_uint --watch "$watch" 1 86400
  if [[ -n $count ]]; then
    [[ -n $watch ]] || hpc_usage_error "--count needs --watch (accepted: --watch SECONDS --count N)"
    hpc_check_uint --count "$count" 1
  fi
  hpc_require_slurm squeue sacct
  runs_dir=$(hpc_runs_dir "$runs_dir")
  if ((run_given)) && [[ ! -d $runs_dir/$run ]]; then
    hpc_usage_error "bad --run '$(hpc_printable "$run")' (accepted: the name of a run directory under $runs_dir)"
  fi
  if [[ -z $watch ]]; then
    show_once "$runs_dir" "$run"
  else
    watch_loop "$runs_dir" "$run" "$((10#$watch))" "$((10#${count:-0}))"
  fi
}

main "$@"
