#!/usr/bin/env bash
# Start, stop and inspect a real Slurm 22.05 on this one machine, for tests and
# for trying the launcher without a cluster: munged, MariaDB + slurmdbd
# (accounting, so sacct works), slurmctld and N slurmd (nodes n1..nN on one host,
# each with 2 fake GPUs as GRES).
#
# Everything generated (configs, databases, pid files, logs) lives in one state
# directory, so `down` and a fresh start never touch anything that is not ours.
# slurm.conf must still be /etc/slurm/slurm.conf (where the Debian client tools
# look); ours carries MARKER on its first line, and a foreign one is backed up
# before we overwrite it and restored by `down`.
set -euo pipefail

PROG=$(basename "$0")
STATE_DIR=${LOCAL_SLURM_DIR:-/var/lib/hpc-local-slurm}
ETC_SLURM=/etc/slurm
MARKER_PREFIX="# Written by hpc local_slurm.sh"
# Bump CONF_VERSION whenever the generated slurm.conf changes, so that `up` on a
# running cluster rewrites it and restarts the daemons instead of "nothing to do".
CONF_VERSION=3
MARKER="$MARKER_PREFIX v$CONF_VERSION (state in ${STATE_DIR}); safe to overwrite."
CLUSTER_NAME=local
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
DB_PORT=${LOCAL_SLURM_DB_PORT:-3306}
DB_NAME=slurm_acct_db
DB_USER=slurm
FIRST_NODE_PORT=17001
GPUS_PER_NODE=2

RUN_DIR=$STATE_DIR/run
LOG_DIR=$STATE_DIR/log
MYSQL_DATA=$STATE_DIR/mysql
MYSQL_RUN=$STATE_DIR/mysql-run
# mysqld runs as the mysql user, so its socket, pid file and log live in a
# directory that user owns.
MYSQL_SOCK=$MYSQL_RUN/mysqld.sock
MYSQL_PID=$MYSQL_RUN/mysqld.pid
MYSQL_LOG=$MYSQL_RUN/mysqld.log
DEV_DIR=$STATE_DIR/dev
BACKUP_DIR=$STATE_DIR/backup

usage() {
  cat <<EOF
Usage: $PROG up [--nodes N] [--timeout SECONDS] [--slurmd_timeout SECONDS]
       $PROG down
       $PROG status

A real Slurm (22.05, Debian packages) on this machine, with accounting.
  up      install the packages if missing, start munged, MariaDB, slurmdbd,
          slurmctld and N slurmd (nodes n1..nN, ${GPUS_PER_NODE} fake GPUs each), wait
          until the nodes are idle. Safe to repeat; a different N reconfigures.
  down    stop the daemons this script started (by its own pid files).
  status  daemons up/down, sinfo, whether sacct works; non-zero if not up.

Options:
  --nodes N          number of slurmd nodes for 'up' (default 1)
  --timeout SECONDS  how long 'up' waits for idle nodes (default 90)
  --slurmd_timeout SECONDS
                     how long a silent node may be before Slurm declares it
                     down and its jobs NODE_FAIL (SlurmdTimeout; default 60,
                     Slurm's own is 300: tests of a lost node stay short)
  -h, --help         this help

State directory: $STATE_DIR (set LOCAL_SLURM_DIR to change).
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; echo "Try '$PROG -h'." >&2; exit 2; }
say() { echo "[local_slurm] $*"; }

# --- pid files --------------------------------------------------------------

# A pid file names a live process of the expected program. Checking the
# command name guards against a recycled pid after a reboot or crash.
pid_alive() {
  local pidfile=$1 pattern=$2 pid comm
  [[ -s $pidfile ]] || return 1
  pid=$(tr -dc '0-9' <"$pidfile")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm =~ ^($pattern)$ ]]
}

# Stop the process named by a pid file of ours: TERM, then KILL after a grace.
stop_pidfile() {
  local pidfile=$1 pattern=$2 label=$3 pid i
  if ! pid_alive "$pidfile" "$pattern"; then
    rm -f "$pidfile"
    return 0
  fi
  pid=$(tr -dc '0-9' <"$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$label (pid $pid) ignored TERM for 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  say "stopped $label (pid $pid)"
}

# --- install ----------------------------------------------------------------

missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$pkg"
  done
}

install_packages() {
  local missing
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  say "installing ${missing[*]} (apt-get)"
  # Package scripts try to start services; without systemd policy-rc.d refuses,
  # which is harmless: we start the daemons ourselves below.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$LOG_DIR/apt.log" 2>&1 || { tail -n 20 "$LOG_DIR/apt.log" >&2; die "apt-get update failed (log: $LOG_DIR/apt.log)"; }
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LOG_DIR/apt.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $LOG_DIR/apt.log)"; }
}

# --- munge ------------------------------------------------------------------

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_works; then
    return 0  # ours or the system's: either way authentication works
  fi
  [[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (reinstall munge: apt-get install --reinstall munge)"
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  local i
  for ((i = 0; i < 50; i++)); do
    munge_works && break
    sleep 0.1
  done
  munge_works || die "munged did not start (see /var/log/munge/munged.log)"
  # Claim it: `down` stops only daemons whose pid we recorded here.
  cp /run/munge/munged.pid "$RUN_DIR/munged.pid"
  say "started munged"
}

# --- MariaDB ----------------------------------------------------------------

mysql_root() { mysql --no-defaults --protocol=socket --socket="$MYSQL_SOCK" -uroot "$@"; }

start_mysql() {
  if pid_alive "$MYSQL_PID" 'mysqld|mariadbd' && mysql_root -e 'select 1' >/dev/null 2>&1; then
    return 0
  fi
  install -d -o mysql -g mysql -m 0755 "$MYSQL_RUN" /run/mysqld
  if [[ ! -d $MYSQL_DATA/mysql ]]; then
    say "initialising the accounting database in $MYSQL_DATA"
    install -d -o mysql -g mysql -m 0750 "$MYSQL_DATA"
    mariadb-install-db --no-defaults --user=mysql --datadir="$MYSQL_DATA" \
      --auth-root-authentication-method=socket --skip-test-db >"$LOG_DIR/mysql-install.log" 2>&1 \
      || { tail -n 20 "$LOG_DIR/mysql-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  # --no-defaults: Debian's my.cnf points at /var/lib/mysql and syslog; we want
  # our own data dir, socket and log. mysqld_safe restarts mysqld if it dies.
  setsid mysqld_safe --no-defaults --user=mysql --datadir="$MYSQL_DATA" \
    --socket="$MYSQL_SOCK" --pid-file="$MYSQL_PID" --log-error="$MYSQL_LOG" \
    --bind-address=127.0.0.1 --port="$DB_PORT" \
    --innodb-buffer-pool-size=256M --innodb-lock-wait-timeout=900 </dev/null >>"$LOG_DIR/mysqld_safe.log" 2>&1 &
  echo $! >"$RUN_DIR/mysqld_safe.pid"
  local i
  for ((i = 0; i < 300; i++)); do
    mysql_root -e 'select 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  mysql_root -e 'select 1' >/dev/null 2>&1 || { tail -n 20 "$MYSQL_LOG" >&2; die "MariaDB did not answer on $MYSQL_SOCK within 30 s (port $DB_PORT busy? set LOCAL_SLURM_DB_PORT)"; }
  say "started MariaDB (127.0.0.1:$DB_PORT)"
}

db_password() {
  local file=$STATE_DIR/etc/db.pass
  if [[ ! -s $file ]]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$file")
  fi
  cat "$file"
}

create_db() {
  local pass
  pass=$(db_password)
  mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

# --- config files -----------------------------------------------------------

# Write a file under /etc/slurm, keeping a copy of a foreign one (no MARKER).
# Returns 0 if the content changed, 1 if it was already the same.
install_conf() {
  local dest=$1 mode=$2 tmp=$3
  if [[ -f $dest ]] && ! grep -qF "$MARKER_PREFIX" "$dest" && [[ ! -e $BACKUP_DIR/$(basename "$dest") ]]; then
    cp -p "$dest" "$BACKUP_DIR/$(basename "$dest")"
    say "backed up the existing $dest to $BACKUP_DIR/ (restored by 'down')"
  fi
  if [[ -f $dest ]] && cmp -s "$tmp" "$dest"; then
    rm -f "$tmp"
    return 1
  fi
  install -m "$mode" -o root -g root "$tmp" "$dest"
  rm -f "$tmp"
  return 0
}

# Memory per node: 70% of what is available now, shared among the nodes,
# rounded down to 512 MB so repeated `up` calls produce the same config.
node_memory_mb() {
  local nodes=$1 avail_kb
  avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  echo $((avail_kb * 7 / (1024 * 10 * nodes) / 512 * 512))
}

write_slurmdbd_conf() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
PidFile=$RUN_DIR/slurmdbd.pid
LogFile=$LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$(db_password)
StorageLoc=$DB_NAME
EOF
  install_conf "$ETC_SLURM/slurmdbd.conf" 600 "$tmp" || true
}

# slurm.conf and gres.conf for N nodes; returns 0 if either changed.
write_slurm_conf() {
  local nodes=$1 host cpus mem defmem tmp changed=1 n
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(node_memory_mb "$nodes")
  ((mem >= 512)) || die "too little free memory for $nodes nodes (${mem} MB each); use fewer --nodes"
  # A job without --mem would otherwise get the whole node's memory and block
  # every other job there (CR_CPU_Memory counts memory).
  defmem=$((mem / cpus < 1024 ? mem / cpus : 1024))
  tmp=$(mktemp)
  {
    echo "$MARKER"
    cat <<EOF
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd/%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# A requeued job may start again cred_expire seconds after its requeue (120 by
# default; Slurm's own test configs use 30 "for quicker requeue") and is then
# picked up by the next main scheduling pass (every 60 s by default). One
# machine can afford both shorter: requeue mode restarts in ~40 s, not ~3 min.
AuthInfo=cred_expire=30
SchedulerParameters=sched_interval=10
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$defmem
GresTypes=gpu
JobRequeue=1
ReturnToService=2
MinJobAge=120
# Slurm's default (30 s), as clusters have it: a cancelled job's end hook has that long after TERM (on a
# busy 2-core machine 10 s is not always enough to record a scancel as a stop)
KillWait=30
# A node that stops answering (its slurmd killed: the tests' lost node) is
# declared down, and its jobs NODE_FAIL, about this long after its last answer.
SlurmdTimeout=$SLURMD_TIMEOUT
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
EOF
    for ((n = 1; n <= nodes; n++)); do
      echo "NodeName=n$n NodeHostname=$host Port=$((FIRST_NODE_PORT + n - 1)) CPUs=$cpus RealMemory=$mem Gres=gpu:$GPUS_PER_NODE State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$tmp"
  install_conf "$ETC_SLURM/slurm.conf" 644 "$tmp" && changed=0

  # Character devices (like /dev/null) as GPU files: slurmd wants real device
  # files; plain files work but log an error per node start.
  install -d -m 0755 "$DEV_DIR"
  for ((n = 0; n < GPUS_PER_NODE; n++)); do
    [[ -c $DEV_DIR/gpu$n ]] || { rm -f "$DEV_DIR/gpu$n"; mknod "$DEV_DIR/gpu$n" c 1 3; }
  done
  tmp=$(mktemp)
  {
    echo "$MARKER"
    echo "AutoDetect=off"
    for ((n = 1; n <= nodes; n++)); do
      echo "NodeName=n$n Name=gpu File=$DEV_DIR/gpu[0-$((GPUS_PER_NODE - 1))]"
    done
  } >"$tmp"
  install_conf "$ETC_SLURM/gres.conf" 644 "$tmp" && changed=0
  return "$changed"
}

# Was slurm.conf written by this version of the script?
conf_is_current() { [[ -f $ETC_SLURM/slurm.conf ]] && [[ $(head -n 1 "$ETC_SLURM/slurm.conf") == "$MARKER" ]]; }

# Does the slurm.conf we wrote last have this SlurmdTimeout?
slurmd_timeout_is() { grep -qx "SlurmdTimeout=$1" "$ETC_SLURM/slurm.conf" 2>/dev/null; }

# Node count of the slurm.conf we wrote last, or 0.
configured_nodes() {
  if [[ -f $ETC_SLURM/slurm.conf ]] && grep -qF "$MARKER_PREFIX" "$ETC_SLURM/slurm.conf"; then
    grep -c '^NodeName=' "$ETC_SLURM/slurm.conf" || true
  else
    echo 0
  fi
}

# --- slurm daemons ----------------------------------------------------------

start_slurmdbd() {
  if ! pid_alive "$RUN_DIR/slurmdbd.pid" slurmdbd; then
    slurmdbd </dev/null >>"$LOG_DIR/slurmdbd.out" 2>&1 || die "slurmdbd failed to start (see $LOG_DIR/slurmdbd.log)"
    say "started slurmdbd"
  fi
  # slurmdbd creates its tables on first start, which takes a while (~20 s).
  local i
  for ((i = 0; i < 120; i++)); do
    sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1 && break
    sleep 0.5
  done
  sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1 \
    || { tail -n 20 "$LOG_DIR/slurmdbd.log" >&2; die "slurmdbd did not answer within 60 s"; }
  if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
    say "added cluster '$CLUSTER_NAME' to accounting"
  fi
}

start_slurmctld() {
  if pid_alive "$RUN_DIR/slurmctld.pid" slurmctld; then
    return 0
  fi
  install -d -m 0755 "$STATE_DIR/slurmctld"
  slurmctld </dev/null >>"$LOG_DIR/slurmctld.out" 2>&1 || die "slurmctld failed to start (see $LOG_DIR/slurmctld.log)"
  say "started slurmctld"
}

slurmd_pidfile() { echo "$RUN_DIR/slurmd-$1.pid"; }

start_slurmd() {
  local node=$1
  pid_alive "$(slurmd_pidfile "$node")" slurmd && return 0
  install -d -m 0755 "$STATE_DIR/slurmd/$node"
  slurmd -N "$node" </dev/null >>"$LOG_DIR/slurmd-$node.out" 2>&1 || die "slurmd $node failed to start (see $LOG_DIR/slurmd-$node.log)"
  say "started slurmd $node"
}

stop_all_slurmd() {
  local pidfile node
  for pidfile in "$RUN_DIR"/slurmd-*.pid; do
    [[ -e $pidfile ]] || continue
    node=${pidfile##*/slurmd-}
    stop_pidfile "$pidfile" slurmd "slurmd ${node%.pid}"
  done
}

# Nodes n1..nN all schedulable (idle, or busy with someone's jobs).
nodes_ready() {
  local nodes=$1 n state
  for ((n = 1; n <= nodes; n++)); do
    state=$(sinfo -h -n "n$n" -o %T 2>/dev/null | head -n 1) || return 1
    [[ $state =~ ^(idle|mixed|allocated|completing)$ ]] || return 1
  done
}

wait_for_nodes() {
  local nodes=$1 timeout=$2 start=$SECONDS log
  while ((SECONDS - start < timeout)); do
    nodes_ready "$nodes" && return 0
    sleep 0.5
  done
  {
    echo "$PROG: error: nodes n1..n$nodes not idle after ${timeout}s; sinfo:"
    sinfo -N -o '%N %T %E' 2>&1 || true
    for log in "$LOG_DIR/slurmctld.log" "$LOG_DIR"/slurmd-n*.log; do
      [[ -f $log ]] || continue
      echo "--- tail of $log"
      tail -n 15 "$log"
    done
  } >&2
  exit 1
}

all_running() {
  local nodes=$1 n
  pid_alive "$MYSQL_PID" 'mysqld|mariadbd' || return 1
  pid_alive "$RUN_DIR/slurmdbd.pid" slurmdbd || return 1
  pid_alive "$RUN_DIR/slurmctld.pid" slurmctld || return 1
  for ((n = 1; n <= nodes; n++)); do
    pid_alive "$(slurmd_pidfile "n$n")" slurmd || return 1
  done
  munge_works
}

# --- commands ---------------------------------------------------------------

cmd_up() {
  local nodes=$1 timeout=$2 n
  [[ $(id -u) == 0 ]] || die "'up' needs root (it installs packages and starts daemons); run it with sudo"
  install -d -m 0755 "$STATE_DIR" "$RUN_DIR" "$LOG_DIR" "$BACKUP_DIR" "$STATE_DIR/slurmd"
  install -d -m 0700 "$STATE_DIR/etc"
  install -d -m 0755 "$ETC_SLURM"

  if [[ $(configured_nodes) == "$nodes" ]] && conf_is_current && slurmd_timeout_is "$SLURMD_TIMEOUT" \
    && all_running "$nodes" && nodes_ready "$nodes"; then
    say "already up with $nodes node(s); nothing to do"
    return 0
  fi

  install_packages
  start_munge
  start_mysql
  create_db
  write_slurmdbd_conf
  # sacctmgr, with which we wait for slurmdbd, reads slurm.conf, so write it first.
  local changed=1
  write_slurm_conf "$nodes" && changed=0
  start_slurmdbd
  if ((changed == 0)); then
    # Node set or parameters changed: slurmctld only reads the node table at
    # start, and every slurmd must agree with it.
    if pid_alive "$RUN_DIR/slurmctld.pid" slurmctld || compgen -G "$RUN_DIR/slurmd-*.pid" >/dev/null; then
      say "configuration changed ($nodes node(s)); restarting slurmctld and slurmd"
      stop_all_slurmd
      stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld slurmctld
    fi
  fi
  start_slurmctld
  for ((n = 1; n <= nodes; n++)); do
    start_slurmd "n$n"
  done
  wait_for_nodes "$nodes" "$timeout"
  say "up: $nodes node(s) idle, partition 'debug', ${GPUS_PER_NODE} fake GPUs per node, accounting on (took ${SECONDS}s)"
}

restore_backups() {
  local file
  for file in "$BACKUP_DIR"/*; do
    [[ -e $file ]] || continue
    cp -p "$file" "$ETC_SLURM/$(basename "$file")"
    rm -f "$file"
    say "restored the previous $ETC_SLURM/$(basename "$file")"
  done
}

cmd_down() {
  [[ -d $STATE_DIR ]] || { say "nothing to stop ($STATE_DIR does not exist)"; return 0; }
  stop_all_slurmd
  stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld slurmctld
  stop_pidfile "$RUN_DIR/slurmdbd.pid" slurmdbd slurmdbd
  if pid_alive "$MYSQL_PID" 'mysqld|mariadbd'; then
    # A clean shutdown; mysqld_safe exits when mysqld exits on purpose.
    mysqladmin --no-defaults --protocol=socket --socket="$MYSQL_SOCK" -uroot shutdown >/dev/null 2>&1 || true
    stop_pidfile "$MYSQL_PID" 'mysqld|mariadbd' MariaDB
  fi
  stop_pidfile "$RUN_DIR/mysqld_safe.pid" 'mysqld_safe' mysqld_safe
  stop_pidfile "$RUN_DIR/munged.pid" munged munged
  restore_backups
  say "down"
}

daemon_line() {
  local label=$1 pidfile=$2 pattern=$3
  if pid_alive "$pidfile" "$pattern"; then
    printf '  %-14s up (pid %s)\n' "$label" "$(tr -dc '0-9' <"$pidfile")"
  else
    printf '  %-14s down\n' "$label"
    return 1
  fi
}

cmd_status() {
  local ok=0 nodes n out
  nodes=$(configured_nodes)
  echo "state dir: $STATE_DIR; configured nodes: $nodes"
  echo "daemons:"
  if munge_works; then
    if pid_alive "$RUN_DIR/munged.pid" munged; then
      daemon_line munged "$RUN_DIR/munged.pid" munged
    else
      printf '  %-14s up (not started by this script)\n' munged
    fi
  else
    printf '  %-14s down\n' munged; ok=1
  fi
  daemon_line MariaDB "$MYSQL_PID" 'mysqld|mariadbd' || ok=1
  daemon_line slurmdbd "$RUN_DIR/slurmdbd.pid" slurmdbd || ok=1
  daemon_line slurmctld "$RUN_DIR/slurmctld.pid" slurmctld || ok=1
  ((nodes > 0)) || ok=1
  for ((n = 1; n <= nodes; n++)); do
    daemon_line "slurmd n$n" "$(slurmd_pidfile "n$n")" slurmd || ok=1
  done
  echo "sinfo:"
  if command -v sinfo >/dev/null && out=$(sinfo -N -o '%N %P %T %c %m %G' 2>&1); then
    printf '  %s\n' "${out//$'\n'/$'\n'  }"
    ((nodes > 0)) && ! nodes_ready "$nodes" && ok=1
  else
    echo "  unavailable: ${out:-sinfo not installed}"; ok=1
  fi
  if command -v sacct >/dev/null && out=$(sacct -n -X -S now-1hour -o JobID 2>&1); then
    echo "sacct: works"
  else
    echo "sacct: not working: ${out:-sacct not installed}" | head -n 3; ok=1
  fi
  if ((ok == 0)); then echo "local Slurm is up"; else echo "local Slurm is NOT up (start it: $PROG up)"; fi
  return "$ok"
}

main() {
  local command="" nodes=1 timeout=90
  SLURMD_TIMEOUT=60
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      up | down | status)
        [[ -z $command ]] || usage_error "one command at a time (got '$command' and '$1')"
        command=$1 ;;
      --nodes)
        (($# >= 2)) || usage_error "--nodes needs a value (a whole number 1-16)"
        nodes=$2; shift ;;
      --nodes=*) nodes=${1#*=} ;;
      --timeout)
        (($# >= 2)) || usage_error "--timeout needs a value (seconds)"
        timeout=$2; shift ;;
      --timeout=*) timeout=${1#*=} ;;
      --slurmd_timeout)
        (($# >= 2)) || usage_error "--slurmd_timeout needs a value (seconds)"
        SLURMD_TIMEOUT=$2; shift ;;
      --slurmd_timeout=*) SLURMD_TIMEOUT=${1#*=} ;;
      *) usage_error "unknown argument '$1' (accepted: up [--nodes N] [--timeout S] [--slurmd_timeout S], down, status, -h)" ;;
    esac
    shift
  done
  [[ -n $command ]] || usage_error "missing command (accepted: up, down, status)"
  if ! [[ $nodes =~ ^[0-9]+$ ]] || ((nodes < 1 || nodes > 16)); then
    usage_error "bad --nodes '$nodes' (accepted: a whole number 1-16)"
  fi
  if ! [[ $timeout =~ ^[0-9]+$ ]] || ((timeout < 1)); then
    usage_error "bad --timeout '$timeout' (accepted: whole seconds >= 1)"
  fi
  if ! [[ $SLURMD_TIMEOUT =~ ^[0-9]+$ ]] || ((SLURMD_TIMEOUT < 10 || SLURMD_TIMEOUT > 65533)); then
    usage_error "bad --slurmd_timeout '$SLURMD_TIMEOUT' (accepted: whole seconds 10-65533)"
  fi
  case $command in
    up) cmd_up "$nodes" "$timeout" ;;
    down) cmd_down ;;
    status) cmd_status ;;
  esac
}

main "$@"
