"""Per accepted request: weir's events, syscalls and core 1's softirq share (stat.sh output)."""
import json, re, sys, glob, os
rows = []
for d in sorted(glob.glob(os.path.join(os.path.dirname(__file__) or '.', '[0-9]*-*'))):
    s = d.rsplit('-', 1)[1]
    j = json.load(open(f'{d}/{s}.json'))
    secs = j['seconds']
    # stat.sh counts from 5 s after weir starts, loadgen starts about 1 s after weir
    win = [x for x in secs if 4 <= x['t'] < 14]
    ok = sum(x['counts']['ok'] for x in win)
    ref = sum(x['counts']['status_429'] + x['counts']['status_503'] for x in win)
    ev = {}
    for line in open(f'{d}/{s}.stat'):
        m = re.match(r'\s*([\d,.]+)\s+(?:msec\s+)?(\S+)', line)
        if m and not line.strip().startswith('#'):
            try: ev[m.group(2)] = float(m.group(1).replace(',', ''))
            except ValueError: pass
    p = [list(map(int, l.split()[1:8])) for l in open(f'{d}/{s}.proc1')]
    dp = [b - a for a, b in zip(p[0], p[1])]
    tot = sum(dp) or 1
    rows.append((os.path.basename(d), ok, ref, ev, dp, tot))
keys = ['task-clock', 'context-switches', 'page-faults', 'raw_syscalls:sys_enter', 'syscalls:sys_enter_recvmsg',
        'syscalls:sys_enter_recvfrom', 'syscalls:sys_enter_sendmsg', 'syscalls:sys_enter_writev', 'syscalls:sys_enter_write',
        'syscalls:sys_enter_epoll_wait', 'syscalls:sys_enter_futex', 'syscalls:sys_enter_madvise', 'syscalls:sys_enter_mmap',
        'syscalls:sys_enter_munmap', 'syscalls:sys_enter_accept4']
names = ['CPU us'] + [k.split(':')[-1].replace('sys_enter_', '') for k in keys[1:]]
print('| run | ok req (10 s) | refused | ' + ' | '.join(names) + ' | core 1 user / sys / softirq % |')
print('|' + '---|' * (len(keys) + 4))
for name, ok, ref, ev, dp, tot in rows:
    per = [ev.get(k, 0) / max(ok, 1) for k in keys]
    per[0] = ev.get('task-clock', 0) * 1000 / max(ok, 1)  # task-clock in msec -> us per request
    print(f'| {name} | {ok} | {ref} | ' + ' | '.join(f'{v:.2f}' for v in per) +
          f' | {100*dp[0]/tot:.0f} / {100*dp[2]/tot:.0f} / {100*dp[6]/tot:.0f} |')
