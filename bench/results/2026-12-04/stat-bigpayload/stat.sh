#!/bin/bash
# Counts software events and system calls of weir's process (and softirqs on weir's core)
# for 10 s of each scenario named, from 5 s after weir starts:
#   OUT=<dir> stat.sh A D   (beside scripts/bench-scenarios.sh run with the same SCENARIOS)
# writes OUT/<scenario>.stat (weir's process), OUT/<scenario>.core1.stat (core 1) and
# OUT/<scenario>.proc1 (core 1's /proc/stat line before and after: user, nice, system, idle,
# iowait, irq, softirq in clock ticks).
OUT=${OUT:-.}
EV=task-clock,context-switches,cpu-migrations,page-faults,raw_syscalls:sys_enter
EV=$EV,syscalls:sys_enter_recvmsg,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read
EV=$EV,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_writev
EV=$EV,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex
EV=$EV,syscalls:sys_enter_madvise,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap
EV=$EV,syscalls:sys_enter_accept4,syscalls:sys_enter_close,syscalls:sys_enter_shutdown
for s in "$@"; do
  pid=""
  until [ -n "$pid" ]; do pid=$(pgrep -f "weir --config .*weir-$s.yaml" | while read -r p; do [ "$(cat /proc/$p/comm)" = weir ] && echo "$p"; done | head -1); sleep 0.05; done
  sleep 5
  taskset -c 0 perf stat -e "$EV" -p "$pid" -o "$OUT/$s.stat" -- sleep 10 &
  taskset -c 0 perf stat -a -C 1 -e cpu-clock,irq:softirq_entry,net:netif_receive_skb,net:net_dev_xmit -o "$OUT/$s.core1.stat" -- sleep 10 2>/dev/null &
  grep "^cpu1 " /proc/stat > "$OUT/$s.proc1"
  wait
  grep "^cpu1 " /proc/stat >> "$OUT/$s.proc1"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
done
