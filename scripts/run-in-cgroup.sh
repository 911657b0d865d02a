#!/usr/bin/env bash
# Runs a command inside a fresh, real cgroup with a CPU quota and a memory limit, the way
# a container runtime would (v1: cpu, cpuacct, cpuset and memory, which may be mounted
# apart; v2: cpu.max and memory.max). Needs root and a writable cgroupfs.
#
#   scripts/run-in-cgroup.sh NAME CPUS MEM_BYTES -- COMMAND ARGS...
#
# Prints the cgroup directories on stderr; the command replaces the shell (exec), so its
# PID is this script's PID. Remove the cgroup afterwards with `scripts/run-in-cgroup.sh
# --remove NAME`. CPUSET (e.g. "1") also confines the cgroup to those cores, as a
# container with a dedicated core (Kubernetes' static CPU manager) is.
set -euo pipefail

v1_mount() { awk -v c="$1" '$0 ~ / - cgroup / { n=split($NF, o, ","); for (i=1;i<=n;i++) if (o[i]==c) { print $5; exit } }' /proc/self/mountinfo; }

dirs_for() {
  local name=$1
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo "/sys/fs/cgroup/$name"
  else
    for c in cpu cpuacct cpuset memory; do echo "$(v1_mount "$c")/$name"; done | sort -u
  fi
}

if [ "${1:-}" = "--remove" ]; then
  for d in $(dirs_for "$2"); do rmdir "$d" 2>/dev/null || true; done
  exit 0
fi

name=$1 cpus=$2 mem=$3; shift 3
[ "${1:-}" = "--" ] && shift
quota=$(awk -v c="$cpus" 'BEGIN { printf "%d", c * 100000 }')
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo "+cpu +memory +cpuset" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  d=/sys/fs/cgroup/$name
  mkdir -p "$d"
  echo "$quota 100000" > "$d/cpu.max"
  echo "$mem" > "$d/memory.max"
  echo 0 > "$d/memory.swap.max" 2>/dev/null || true
  [ -n "${CPUSET:-}" ] && echo "$CPUSET" > "$d/cpuset.cpus"
  echo "cgroup v2: $d" >&2
  echo $$ > "$d/cgroup.procs"
else
  for c in cpu cpuacct cpuset memory; do
    m=$(v1_mount "$c"); d="$m/$name"
    mkdir -p "$d"
    if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
      cat "$m/cpuset.cpus" > "$d/cpuset.cpus"; cat "$m/cpuset.mems" > "$d/cpuset.mems"
    fi
    [ -n "${CPUSET:-}" ] && [ -f "$d/cpuset.cpus" ] && echo "$CPUSET" > "$d/cpuset.cpus"
    if [ -f "$d/cpu.cfs_quota_us" ]; then echo 100000 > "$d/cpu.cfs_period_us"; echo "$quota" > "$d/cpu.cfs_quota_us"; fi
    if [ -f "$d/memory.limit_in_bytes" ]; then
      echo "$mem" > "$d/memory.limit_in_bytes"
      echo "$mem" > "$d/memory.memsw.limit_in_bytes" 2>/dev/null || true
      # v2 charges socket buffers (bytes a client sent that weir has not read) to
      # memory.current; v1 keeps them apart and counts them only once a TCP limit has
      # been written. Writing none (-1) switches that count on without limiting anything,
      # so memory.kmem.tcp.max_usage_in_bytes says what the buffers would have added to
      # the container's memory under v2.
      echo -1 > "$d/memory.kmem.tcp.limit_in_bytes" 2>/dev/null || true
    fi
    echo $$ > "$d/cgroup.procs"
    echo "cgroup v1 $c: $d" >&2
  done
fi
exec "$@"
