#!/usr/bin/env bash
# Start a one-node Slurm cluster (munged, slurmctld, slurmd) for the Slurm executor tests.
# Debian 12, run as root, works without systemd. Safe to run again while the cluster is up.
#
#   SLURM_CI_DIR        where state, spool, logs and pid files live (default /var/lib/slurm-ci)
#   SLURM_CI_FAKE_GPUS  fake "gpu" GRES on the node; 0 = none (default 2)
#   SLURM_CI_WAIT       seconds to wait for the controller and the node (default 60)
#   SLURM_CI_CLEAN=1    drop the controller's saved state first (job ids start at 1 again)
#
# The config goes to /etc/slurm, the clients' default, so no SLURM_CONF is needed. The pids of
# the daemons this script started are kept in $SLURM_CI_DIR/run/ours-NAME.pid; stop.sh stops
# only those.
set -euo pipefail

DIR=${SLURM_CI_DIR:-/var/lib/slurm-ci}
GPUS=${SLURM_CI_FAKE_GPUS:-2}
WAIT=${SLURM_CI_WAIT:-60}
RUN=$DIR/run
LOGS=$DIR/log
TAG="# written by .ci/slurm/start.sh"

say() { echo "slurm-ci: $*"; }
fail() {
  echo "slurm-ci: error: $*" >&2
  for f in "$LOGS/slurmctld.log" "$LOGS/slurmd.log" /var/log/munge/munged.log; do
    if [ -f "$f" ]; then echo "--- last lines of $f" >&2; tail -n 20 "$f" >&2; fi
  done
  exit 1
}
# A pid file can outlive its daemon (slurmctld leaves a stale one), so a pid counts only
# while /proc/PID/comm still names the daemon.
alive() { [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
ours() { cat "$RUN/ours-$1.pid" 2>/dev/null || true; }
ours_alive() { alive "$(ours "$1")" "$1"; }

[ "$(id -u)" = 0 ] || fail "run me as root"
[[ $GPUS =~ ^[0-9]+$ ]] || fail "SLURM_CI_FAKE_GPUS must be a number"

# --- 1. packages -------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
   ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurmctld, slurmd, slurm-client and munge"
  # Without systemd the packages' install scripts would try to start the services:
  # a policy-rc.d that answers 101 ("not allowed") stops them.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi

# --- 2. munge ----------------------------------------------------------------------------
mkdir -p "$RUN" "$LOGS" "$DIR/state" "$DIR/spool" "$DIR/gpu" /etc/slurm
# munged refuses to run as root ("Logfile is insecure"), so it runs as user munge, and wants
# its directories owned by munge. /run/munge is normally made by systemd.
mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key --force
chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
chmod 700 /etc/munge /var/log/munge
chmod 400 /etc/munge/munge.key
chmod 755 /run/munge
chmod 711 /var/lib/munge

# --- 3. config ---------------------------------------------------------------------------
HOST=$(hostname -s)
# CPUs, sockets, cores and memory as slurmd detects them.
HW=$(slurmd -C | sed -n 's/^NodeName=[^ ]* \(.*[^ ]\) *$/\1/p')
[ -n "$HW" ] || fail "slurmd -C gave no node line"

gres_conf=$TAG
node_gres=""
if [ "$GPUS" -gt 0 ]; then
  # A GPU GRES needs File=, and regular files are rejected; a symlink to /dev/null looks
  # like a device and needs no mknod.
  for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$DIR/gpu/gpu$i"; done
  gres_conf+=$'\n'"NodeName=$HOST Name=gpu File=$DIR/gpu/gpu[0-$((GPUS - 1))]"
  node_gres=" Gres=gpu:$GPUS"
fi
slurm_conf="$TAG
ClusterName=ci
# No name resolution needed: everything talks over 127.0.0.1.
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job may start again once credentials of its last run expire (default 120 s,
# then it waits 121 s in PENDING/BeginTime); 10 s keeps the requeue tests short.
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# Schedule a batch job as soon as it is submitted (about 1 s to start instead of 3 s).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without it a job without --mem takes all of the node's memory.
DefMemPerCPU=2048
# Requests bigger than the node are refused at submit time instead of pending forever.
EnforcePartLimits=ALL
DependencyParameters=kill_invalid_depend
# No slurmdbd: sacct only reads the job completion file (sacct -c).
# (Do not add AccountingStorageTRES=gres/gpu: slurmctld exits without slurmdbd.)
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.txt
# Sample memory every second and kill a job that goes over its --mem.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
# GPUs (fake ones, see gres.conf) as a generic resource.
${node_gres:+GresTypes=gpu}
# Batch jobs may be requeued (scontrol requeue, --requeue).
JobRequeue=1
# Seconds between SIGTERM and SIGKILL when a job is cancelled or runs out of time.
KillWait=10
# Finished jobs stay visible to squeue -t all / scontrol for 10 minutes.
MinJobAge=600
ReturnToService=2
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 NodeHostname=$HOST $HW$node_gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"

changed=0
put() { # put FILE CONTENT: write only on change; keep a copy of a file we did not write
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then return; fi
  if [ -f "$1" ] && ! grep -qF "$TAG" "$1"; then cp -p "$1" "$1.before-slurm-ci"; fi
  printf '%s\n' "$2" >"$1.new" && mv "$1.new" "$1"
  changed=1
}
put /etc/slurm/slurm.conf "$slurm_conf"
put /etc/slurm/gres.conf "$gres_conf"

# --- 4. daemons --------------------------------------------------------------------------
stop_ours() { # stop_ours NAME: SIGTERM, up to 10 s grace (slurmd needs over 1 s), SIGKILL
  local p; p=$(ours "$1")
  if alive "$p" "$1"; then
    kill "$p"
    for _ in $(seq 100); do alive "$p" "$1" || break; sleep 0.1; done
    if alive "$p" "$1"; then kill -9 "$p"; fi
  fi
  rm -f "$RUN/ours-$1.pid"
}
if [ "$changed" = 1 ] && { ours_alive slurmd || ours_alive slurmctld; }; then
  say "config changed, restarting slurmd and slurmctld"
  stop_ours slurmd
  stop_ours slurmctld
fi

launch() { # launch NAME PIDFILE COMMAND...: start a daemon that forks, wait for its pid file
  local name=$1 pidfile=$2 p=""; shift 2
  rm -f "$pidfile"
  "$@" </dev/null >>"$LOGS/$name.out" 2>&1 || fail "$name exited with $? (see $LOGS/$name.out)"
  for _ in $(seq 50); do
    p=$(cat "$pidfile" 2>/dev/null || true)
    if alive "$p" "$name"; then break; fi
    sleep 0.1
  done
  alive "$p" "$name" || fail "$name did not come up"
  echo "$p" >"$RUN/ours-$name.pid"
  say "started $name (pid $p)"
}
# launch_once NAME PIDFILE COMMAND...: unless ours is running; refuse to start a second one
launch_once() {
  if ours_alive "$1"; then say "$1 is already running (pid $(ours "$1"))"; return; fi
  if alive "$(cat "$2" 2>/dev/null || true)" "$1"; then fail "a $1 not started by this script is running"; fi
  launch "$@"
}

# munged: any working munged will do, ours or not.
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "munged is already running"
else
  launch munged /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
fi

if [ "${SLURM_CI_CLEAN:-0}" = 1 ] && ! ours_alive slurmctld; then
  say "SLURM_CI_CLEAN=1: dropping the saved controller state"
  rm -rf "${DIR:?}/state/"* "${DIR:?}/spool/"*
fi

# The controller first: a slurmd that cannot reach it backs off for minutes between retries.
# Every client call has a timeout, since clients hang while the controller is down.
launch_once slurmctld "$RUN/slurmctld.pid" /usr/sbin/slurmctld
deadline=$((SECONDS + WAIT))
until timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; do
  ours_alive slurmctld || fail "slurmctld died while starting"
  [ "$SECONDS" -lt "$deadline" ] || fail "slurmctld does not answer scontrol ping after ${WAIT}s"
  sleep 0.2
done
launch_once slurmd "$RUN/slurmd.pid" /usr/sbin/slurmd

# --- 5. wait until the node takes jobs -----------------------------------------------------
deadline=$((SECONDS + WAIT))
resumed=0
while :; do
  ours_alive slurmctld || fail "slurmctld died"
  ours_alive slurmd || fail "slurmd died"
  state=$(timeout 5 sinfo -h -N -n "$HOST" -o %T 2>/dev/null | head -n 1 || true)
  case $state in
    idle | mixed | allocated | completing) break ;;
    # Left over from an earlier run's state: resume the node once.
    *drain* | down* | inval*)
      if [ "$resumed" = 0 ]; then
        say "node is $state, resuming it"
        timeout 5 scontrol update nodename="$HOST" state=resume || true
        resumed=1
      fi ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    timeout 5 scontrol show node "$HOST" >&2 || true
    fail "node $HOST is '${state:-unknown}' after ${WAIT}s"
  fi
  sleep 0.5
done
say "ready: $(timeout 5 sinfo -h -N -n "$HOST" -o 'node %N %T, cpus %c, memory %m MB, gres %G')"
