#!/usr/bin/env bash
# Make sure a Docker engine answers on this host: install docker.io when dockerd
# is missing, start dockerd in the background, wait until `docker info` works.
#
# Idempotent and safe to run twice at once: a lock serialises the start and the
# engine is re-checked after the lock is taken. Exits non-zero with the engine's
# own error when it cannot start.
#
# Environment:
#   REVISE_DOCKERD_LOG      dockerd log file        (default /var/log/revise-dockerd.log)
#   REVISE_DOCKER_STORAGE   force a storage driver  (default: overlay2, vfs as fallback)
#   REVISE_ENGINE_WAIT      seconds to wait per try (default 60)
set -euo pipefail

LOG=${REVISE_DOCKERD_LOG:-/var/log/revise-dockerd.log}
WAIT=${REVISE_ENGINE_WAIT:-60}
LOCK=/run/revise-engine.lock
LOG_OFFSET=0

say() { printf 'engine: %s\n' "$*" >&2; }

engine_up() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_up; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    say "no Docker engine answers and starting one needs root; run: sudo bash $0"
    exit 1
fi

exec 9>"$LOCK"
# Bounded: a holder that hangs must not wedge every later caller.
if ! flock -w $((WAIT + 30)) 9; then
    say "another engine.sh held $LOCK for $((WAIT + 30))s; checking the engine anyway"
fi
# Another invocation may have started the engine while we waited for the lock.
if command -v docker >/dev/null 2>&1 && engine_up; then
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    say "dockerd missing: installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    # With recommends: cgroupfs-mount and apparmor matter on hosts without systemd.
    apt-get install -y docker.io
fi

# The log lines this attempt wrote (the file also holds earlier attempts).
attempt_log() { tail -c +$((LOG_OFFSET + 1)) "$LOG" 2>/dev/null | tail -n "${1:-15}"; }

# Start dockerd with the given storage driver and wait for it; 0 when it answers.
start_dockerd() {
    local driver=$1
    say "starting dockerd (storage driver $driver), log $LOG"
    {
        printf '\n=== %s revise engine.sh: dockerd --storage-driver=%s\n' "$(date -Is)" "$driver"
    } >>"$LOG"
    LOG_OFFSET=$(stat -c %s "$LOG")
    # 9>&-: dockerd must not inherit the lock, or it would hold it for its lifetime.
    nohup dockerd --storage-driver="$driver" >>"$LOG" 2>&1 </dev/null 9>&- &
    local pid=$!
    local deadline=$((SECONDS + WAIT))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if engine_up; then
            say "engine answers (dockerd pid $pid, storage driver $driver)"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            say "dockerd (storage driver $driver) exited; its log:"
            attempt_log >&2
            return 1
        fi
        sleep 1
    done
    say "dockerd (storage driver $driver) did not answer within ${WAIT}s; its log:"
    attempt_log >&2
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
}

# A dockerd that is running but not answering (still starting, or wedged) would
# hold the pid file and make a second one fail: give it the wait period first.
if pgrep -x dockerd >/dev/null 2>&1; then
    say "dockerd is running but not answering yet; waiting up to ${WAIT}s"
    deadline=$((SECONDS + WAIT))
    while [ "$SECONDS" -lt "$deadline" ]; do
        engine_up && exit 0
        sleep 1
    done
    say "dockerd is running but docker info still fails:"
    docker info 2>&1 | tail -n 5 >&2 || true
    exit 1
fi

if [ -n "${REVISE_DOCKER_STORAGE:-}" ]; then
    start_dockerd "$REVISE_DOCKER_STORAGE" && exit 0
else
    start_dockerd overlay2 && exit 0
    # overlay2 needs an overlay-capable backing filesystem (not overlay-on-overlay,
    # not some nested container setups); vfs always works but copies every layer.
    # Any other failure (iptables, cgroups, permissions) would fail with vfs too.
    if attempt_log 200 | grep -qiE 'graphdriver|overlay|storage.driver|backing file'; then
        say "overlay2 is not usable here; falling back to the vfs storage driver (slower, more disk)"
        start_dockerd vfs && exit 0
    fi
fi

say "the Docker engine could not start; the error is in the lines above (full log: $LOG)"
docker info 2>&1 | tail -n 5 >&2 || true
exit 1
