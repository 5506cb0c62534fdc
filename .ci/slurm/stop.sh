#!/usr/bin/env bash
# Stop the daemons that .ci/slurm/start.sh started, and nothing else: it goes by the pids
# start.sh recorded in $SLURM_CI_DIR/run/ours-NAME.pid. Jobs still queued are cancelled
# first, so that no job outlives slurmd.
set -euo pipefail

DIR=${SLURM_CI_DIR:-/var/lib/slurm-ci}
RUN=$DIR/run

say() { echo "slurm-ci: $*"; }
# A pid counts only while /proc/PID/comm still names the daemon (pid files go stale).
alive() { [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
ours() { cat "$RUN/ours-$1.pid" 2>/dev/null || true; }

[ "$(id -u)" = 0 ] || { echo "slurm-ci: error: run me as root" >&2; exit 1; }

# Cancel what is left while our controller still answers (clients hang without one).
if alive "$(ours slurmctld)" slurmctld; then
  mapfile -t jobs < <(timeout 10 squeue -h -t PD,R,S,CF,CG -o %A 2>/dev/null || true)
  if [ "${#jobs[@]}" -gt 0 ]; then
    say "cancelling ${#jobs[@]} job(s)"
    timeout 10 scancel "${jobs[@]}" || true
    # Give them KillWait (10 s) and a little more to finish.
    end=$((SECONDS + 20))
    while [ "$SECONDS" -lt "$end" ] && [ -n "$(timeout 5 squeue -h -t R,CG,CF -o %A || true)" ]; do
      sleep 0.5
    done
  fi
fi

status=0
for name in slurmd slurmctld munged; do
  p=$(ours "$name")
  [ -n "$p" ] || continue
  if alive "$p" "$name"; then
    kill -TERM "$p"
    # slurmd takes over a second to exit: wait up to 15 s before SIGKILL.
    for _ in $(seq 150); do alive "$p" "$name" || break; sleep 0.1; done
    if alive "$p" "$name"; then
      say "$name (pid $p) still there after 15 s, sending SIGKILL"
      kill -KILL "$p"
      sleep 0.5
    fi
    if alive "$p" "$name"; then say "could not stop $name (pid $p)"; status=1; continue; fi
    say "stopped $name (pid $p)"
  fi
  rm -f "$RUN/ours-$name.pid"
done
exit "$status"
