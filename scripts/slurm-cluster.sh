#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the SLURM tests (tests marked `slurm`), without
# systemd: munged, slurmctld and slurmd started by this script, as root.
#
#   bash scripts/slurm-cluster.sh ensure   # sinfo shows a node idle? nothing to do. Else (root):
#                                          # install slurm-wlm + munge if missing, write a munge
#                                          # key if missing and slurm.conf, start the daemons, wait
#   bash scripts/slurm-cluster.sh start    # same as ensure
#   bash scripts/slurm-cluster.sh stop     # stop the daemons THIS script started (pid files)
#   bash scripts/slurm-cluster.sh status   # does the controller answer, and who started it
#
# Everything lives in one machine-wide folder (SWARMLAB_SLURM_DIR, default /var/spool/swarmlab-slurm):
# slurm.conf, state, spool, logs, pid files. The daemons read our slurm.conf through SLURM_CONF,
# which the tests and the runner's submissions need too: `export SLURM_CONF=$dir/slurm.conf`, or
# rely on the link /etc/slurm/slurm.conf this script makes when no other slurm.conf is there.
#   SWARMLAB_SLURM_WAIT   seconds to wait for the node to be idle (default 60)
set -euo pipefail

dir=${SWARMLAB_SLURM_DIR:-/var/spool/swarmlab-slurm}
wait_s=${SWARMLAB_SLURM_WAIT:-60}
conf="$dir/slurm.conf"
me="slurm-cluster.sh"
export SLURM_CONF="$conf"

node=$(hostname -s)

# The controller answers, this node's slurmd answers (the controller goes on calling a node
# idle for SlurmdTimeout after its slurmd died), and the node takes jobs (idle, mixed, allocated,
# completing).
answers() {
  timeout 10 scontrol show slurmd >/dev/null 2>&1 &&
    timeout 10 sinfo -h -N -n "$node" -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated|completing)$'
}

# The pid in pid file $1, if that process is still a $2 (guards against a reused pid).
our_pid() {
  local file=$1 comm=$2 pid
  [ -r "$file" ] || return 1
  pid=$(cat "$file")
  [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
  echo "$pid"
}

install_packages() {
  local missing=()
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$me: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; } </dev/null >/tmp/swarmlab-slurm-apt.log 2>&1; then
    echo "$me: installing ${missing[*]} failed; see /tmp/swarmlab-slurm-apt.log" >&2
    tail -n 20 /tmp/swarmlab-slurm-apt.log >&2 || true
    exit 1
  fi
}

munge_key() {
  local key=/etc/munge/munge.key
  [ -s "$key" ] && return 0
  echo "$me: writing a munge key ($key)"
  mkdir -p /etc/munge
  # A random key: one node shares it with nobody. munged refuses a key others can read.
  (umask 077 && dd if=/dev/urandom of="$key" bs=1024 count=1 status=none)
  chown munge:munge "$key" 2>/dev/null || true
  chmod 400 "$key"
}

# Written each time this script starts the daemons: a conf from an older version of this script,
# or from before the machine changed, never lingers.
write_conf() {
  # slurmd -C: this machine's CPUs, sockets, cores, threads and memory as slurmd will see them
  # (a NodeName line that claims more than the machine has leaves the node INVALID).
  local hw
  hw=$(slurmd -C | head -n 1 | sed -E 's/^NodeName=[^ ]+ //; s/ UpTime=.*//')
  local gres_types="" gres_node=""
  rm -f "$dir/gres.conf"
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    local n
    n=$(nvidia-smi -L | grep -c '^GPU ')
    if [ "$n" -gt 0 ]; then
      gres_types="GresTypes=gpu"
      gres_node="Gres=gpu:$n"
      # Each GPU as a device file, so that a job's gres=gpu:1 gets one of them.
      : >"$dir/gres.conf"
      for ((i = 0; i < n; i++)); do echo "NodeName=$node Name=gpu File=/dev/nvidia$i" >>"$dir/gres.conf"; done
    fi
  fi
  cat >"$conf" <<EOF
# Written by scripts/slurm-cluster.sh (ensure) for a one-node test cluster on $node.
ClusterName=swarmlab
SlurmctldHost=$node
# Root runs the daemons here (no slurm user to set up); jobs run as their submitter.
SlurmUser=root
AuthType=auth/munge
# Debian's default MPI plugin (pmix) is not installed, and no mailer is: quiet logs.
MpiDefault=none
MailProg=/bin/true
# All state in one folder, so that stop/ensure cycles and another clone find the same cluster.
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No systemd and cgroup v1 without delegation here: linuxproc tracks a job's processes by
# parentage and task/none binds nothing (the cgroup plugins need a mounted, writable hierarchy).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# CPUs and memory as consumable resources (and GPUs as gres), so that a job's cpus_per_task,
# mem_gb and gres are what it gets; cons_tres is the plugin that knows gres=gpu:N.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
$gres_types
# A preempted or requeued job runs again (scontrol requeue; submitit requeues itself on USR2).
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# A requeued run stops its agents and containers before SIGKILL: give it a minute, not 30 s.
KillWait=60
# No accounting daemon (slurmdbd needs a database): finished jobs stay visible to
# 'scontrol show job' for an hour instead of the default 5 minutes, which is how the tests see
# their state and node.
MinJobAge=3600
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
# The node comes back by itself after slurmd restarts (stop + ensure), instead of staying DOWN.
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$node $hw $gres_node State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  sed -i '/^$/d' "$conf"
}

wait_until_answers() {
  local deadline=$((SECONDS + wait_s))
  until answers; do
    # A node left DOWN or DRAINED by an earlier slurmd: back to service.
    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    if ((SECONDS >= deadline)); then
      echo "$me: node $node not idle after ${wait_s}s:" >&2
      sinfo -N -l >&2 || true
      tail -n 10 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
      return 1
    fi
    sleep 1
  done
}

ensure() {
  if command -v sinfo >/dev/null 2>&1 && [ -s "$conf" ] && answers; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "$me: no SLURM controller answers and only root can start one here: run 'sudo bash scripts/slurm-cluster.sh ensure'" >&2
    exit 2
  fi
  install_packages
  mkdir -p "$dir/state" "$dir/spool"
  munge_key
  write_conf
  # The clients (sinfo, sbatch, submitit's calls) find the conf without SLURM_CONF too.
  if [ ! -e /etc/slurm/slurm.conf ] || [ -L /etc/slurm/slurm.conf ]; then
    mkdir -p /etc/slurm
    ln -sfn "$conf" /etc/slurm/slurm.conf
    [ -e "$dir/gres.conf" ] && ln -sfn "$dir/gres.conf" /etc/slurm/gres.conf
  fi
  if ! our_pid /run/munge/munged.pid munged >/dev/null && ! pgrep -x munged >/dev/null; then
    echo "$me: starting munged"
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
    # munged daemonizes itself; as root it needs --force (it refuses to run as root otherwise
    # when the key's owner differs); its pid file is /run/munge/munged.pid.
    if id munge >/dev/null 2>&1; then
      (cd / && runuser -u munge -- munged) || (cd / && munged --force)
    else
      (cd / && munged --force)
    fi
    touch "$dir/munged.ours"
  fi
  if ! our_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
    echo "$me: starting slurmctld (log: $dir/slurmctld.log)"
    # From /, in its own session: a caller's folder or terminal going away does not take it down.
    (cd / && setsid slurmctld -f "$conf" </dev/null >/dev/null 2>&1)
  fi
  if ! our_pid "$dir/slurmd.pid" slurmd >/dev/null; then
    echo "$me: starting slurmd (log: $dir/slurmd.log)"
    (cd / && setsid slurmd -f "$conf" </dev/null >/dev/null 2>&1)
  fi
  wait_until_answers || exit 1
  echo "$me: node $node idle (SLURM_CONF=$conf)"
}

stop_one() {
  local name=$1 file=$2 pid
  pid=$(our_pid "$file" "$name") || return 0
  echo "$me: stopping $name (pid $pid)"
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "$me: $name (pid $pid) still running 30s after SIGTERM" >&2
      return 1
    fi
    sleep 0.5
  done
}

stop() {
  if [ ! -d "$dir" ]; then
    echo "$me: no cluster started by this script (no $dir); leaving any other alone"
    return 0
  fi
  # Jobs still running would be killed by slurmd's end anyway: cancel them first, in order.
  if answers; then scancel --full --quiet --nodelist="$node" 2>/dev/null || true; fi
  stop_one slurmd "$dir/slurmd.pid"
  stop_one slurmctld "$dir/slurmctld.pid"
  if [ -e "$dir/munged.ours" ]; then
    stop_one munged /run/munge/munged.pid
    rm -f "$dir/munged.ours"
  fi
  echo "$me: cluster stopped"
}

status() {
  local who="not started by this script"
  if our_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then who="started by this script"; fi
  if command -v sinfo >/dev/null 2>&1 && answers; then
    echo "controller answers, node $node $(sinfo -h -N -n "$node" -o '%T') ($who; SLURM_CONF=$conf)"
  else
    echo "no controller answers ($who)"
    return 1
  fi
}

case "${1:-}" in
  ensure | start) ensure ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: bash scripts/slurm-cluster.sh ensure|start|stop|status" >&2
    exit 64
    ;;
esac
