# shellcheck shell=bash
# Shared helpers for tests/cluster/{up,down}. Sourced, not executed.

# shellcheck disable=SC2034  # used by up
cluster_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

STATE="${MESHSCOPE_CLUSTER_DIR:-/tmp/meshscope-cluster}"
case "$STATE" in /*) ;; *) STATE="$PWD/$STATE" ;; esac
STATE="${STATE%/}"
[[ -n "$STATE" && "$STATE" != / ]] || { echo "refusing state dir '$STATE'" >&2; exit 1; }
LOCKFILE="$STATE.lock"

# Start order; stop order is the reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager)

log() { printf '[cluster/%s] %s\n' "${CLUSTER_TOOL:-?}" "$*" >&2; }

take_lock() {
  mkdir -p "$(dirname "$LOCKFILE")"
  exec 9>"$LOCKFILE"
  if ! flock -w "${MESHSCOPE_LOCK_TIMEOUT:-900}" 9; then
    log "ERROR: could not lock $LOCKFILE"
    exit 1
  fi
}

# Kernel start time of a process (clock ticks since boot); survives exec,
# differs for a reused PID.
proc_starttime() {
  local s
  s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  s="${s##*) }"
  # shellcheck disable=SC2086
  set -- $s
  echo "${20}"
}

# Reads "$STATE/<comp>.pid" ("PID STARTTIME"); prints PID if that very process
# is still alive.
component_pid() {
  local f="$STATE/$1.pid" pid st now
  [[ -r "$f" ]] || return 1
  read -r pid st <"$f" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  now="$(proc_starttime "$pid")" || return 1
  [[ "$now" == "$st" ]] || return 1
  pid_running "$pid" || return 1
  echo "$pid"
}

# Detached start: own session/process group, stdin from /dev/null, output to
# the component's log. Records "PID STARTTIME".
start_component() {
  local comp="$1"; shift
  local bin="$1"; shift
  (
    cd "$STATE" || exit 1
    # Do not leak the lock fd: a long-lived holder would block the next up.
    exec 9>&-
    exec setsid "$bin" "$@" </dev/null >"$STATE/$comp.log" 2>&1
  ) &
  local pid=$!
  local st
  st="$(proc_starttime "$pid")" || { log "ERROR: $comp exited immediately"; return 1; }
  echo "$pid $st" >"$STATE/$comp.pid"
  log "$comp started, pid $pid, log $STATE/$comp.log"
}

# True while the process exists and is not a zombie.
pid_running() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != Z ]]
}

stop_pid() {
  local comp="$1" pid="$2" i
  # setsid made it a group leader: signal the whole group (it has no children
  # normally, but be thorough).
  if [[ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$pid" ]]; then
    kill -TERM -- "-$pid" 2>/dev/null || true
  else
    kill -TERM "$pid" 2>/dev/null || true
  fi
  for ((i = 0; i < 150; i++)); do
    pid_running "$pid" || break
    sleep 0.1
  done
  if pid_running "$pid"; then
    log "$comp (pid $pid) ignored SIGTERM for 15 s, sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do pid_running "$pid" || break; sleep 0.1; done
  fi
  # Reap it if it is our own child (only when up fails part-way).
  pid_running "$pid" || wait "$pid" 2>/dev/null || true
  # Otherwise its parent is init: give init a moment to reap the zombie so
  # that pgrep right after down shows nothing.
  for ((i = 0; i < 50; i++)); do [[ -e "/proc/$pid" ]] || break; sleep 0.1; done
  if pid_running "$pid"; then
    log "ERROR: $comp (pid $pid) survived SIGKILL"
    return 1
  fi
  log "$comp (pid $pid) stopped"
}

# PIDs of any process whose command line mentions the state dir and whose
# executable is one of ours: leftovers that lost their pid file.
leftover_pids() {
  local d pid exe
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    exe="$(readlink "$d/exe" 2>/dev/null)" || continue
    case "${exe##*/}" in etcd|kube-apiserver|kube-controller-manager) ;; *) continue ;; esac
    if tr '\0' '\n' <"$d/cmdline" 2>/dev/null | grep -qF -- "$STATE/"; then
      echo "$pid"
    fi
  done
}

stop_all() {
  local i comp pid
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    comp="${COMPONENTS[$i]}"
    if pid="$(component_pid "$comp")"; then
      stop_pid "$comp" "$pid"
    fi
    rm -f "$STATE/$comp.pid"
  done
  for pid in $(leftover_pids); do
    log "leftover process $pid ($(readlink "/proc/$pid/exe" 2>/dev/null)) still uses $STATE, stopping it"
    stop_pid leftover "$pid"
  done
  local left
  left="$(leftover_pids | tr '\n' ' ')"
  if [[ -n "${left// /}" ]]; then
    log "ERROR: processes still running for $STATE: $left"
    return 1
  fi
  return 0
}
