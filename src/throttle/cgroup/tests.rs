//! Fixture trees for v1, v2, hybrid and nested layouts, plus the real machine.

use super::*;

struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }
    fn file(&self, rel: &str, content: &str) -> &Self {
        let p = self.0.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
        self
    }
    fn reader(&self, fallback: f64) -> CgroupReader {
        CgroupReader::discover(self.0.path(), fallback)
    }
}

const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
";

#[test]
fn v1_with_quota_cpuset_and_memory() {
    let t = Tree::new();
    t.file("proc/self/mountinfo", V1_MOUNTINFO)
        .file("proc/self/cgroup", "4:memory:/pod/c1\n3:cpuset:/pod/c1\n2:cpu,cpuacct:/pod/c1\n")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us", "250000")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/cpuacct.usage", "5000000000")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/c1/cpu.cfs_quota_us", "-1")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/c1/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/c1/cpuacct.usage", "1234")
        .file("sys/fs/cgroup/cpuset/pod/c1/cpuset.cpus", "0-3,8,10-11")
        .file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712")
        .file("sys/fs/cgroup/memory/pod/memory.limit_in_bytes", "1073741824")
        .file("sys/fs/cgroup/memory/pod/memory.usage_in_bytes", "600000000")
        .file("sys/fs/cgroup/memory/pod/memory.stat", "cache 1\ninactive_file 7\ntotal_inactive_file 100000000\n")
        .file("sys/fs/cgroup/memory/pod/c1/memory.limit_in_bytes", "9223372036854771712");
    let r = t.reader(0.0);
    assert_eq!(r.layout(), Layout::V1);
    // The leaf says -1; the pod's 2.5 cores bind, below the 7-CPU cpuset.
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 2.5, quota_set: true });
    // Usage is read where the quota sits.
    assert_eq!(r.cpu_usage_nanos(), Some(5_000_000_000));
    assert_eq!(r.cpu_source(), CpuSource::CgroupQuota { path: "pod".into() });
    assert_eq!(r.memory(), Some(MemoryReading { working_set: 500_000_000, limit: Some(1 << 30), sock: None }));
}

#[test]
fn v1_cpuset_smaller_than_quota_and_fallbacks() {
    let t = Tree::new();
    t.file("proc/self/mountinfo", V1_MOUNTINFO)
        .file("proc/self/cgroup", "2:cpu,cpuacct:/\n3:cpuset:/\n4:memory:/\n")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "800000")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "1")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "2-3")
        .file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712")
        .file("sys/fs/cgroup/memory/memory.usage_in_bytes", "1000")
        .file("sys/fs/cgroup/memory/memory.stat", "total_inactive_file 2000\n");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 2.0, quota_set: true });
    assert_eq!(r.cpu_source(), CpuSource::CgroupCpuset { path: String::new() }, "2 CPUs bind before the 8-core quota");
    assert_eq!(r.cpu_usage_nanos(), Some(1));
    // Unlimited memory: no limit (the signal will be invalid), working set clamps at 0.
    assert_eq!(r.memory(), Some(MemoryReading { working_set: 0, limit: None, sock: None }));

    let t = Tree::new();
    t.file("proc/self/mountinfo", V1_MOUNTINFO)
        .file("proc/self/cgroup", "2:cpu,cpuacct:/\n3:cpuset:/\n")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "0-5");
    assert_eq!(t.reader(0.0).cpu_capacity(), CpuCapacity { cores: 6.0, quota_set: false }, "0 = CPUs we may run on");
    assert_eq!(t.reader(1.5).cpu_capacity(), CpuCapacity { cores: 1.5, quota_set: false }, "configured fallback");
}

#[test]
fn v2_nested_limits_and_max() {
    let t = Tree::new();
    t.file("proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
        .file("proc/self/cgroup", "0::/kubepods/burstable/pod1/ctr\n")
        .file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids")
        .file("sys/fs/cgroup/cpu.max", "max 100000")
        .file("sys/fs/cgroup/kubepods/cpu.max", "max 100000")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/cpu.max", "400000 100000")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/cpu.stat", "usage_usec 9000\nuser_usec 1\n")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/ctr/cpu.max", "150000 100000")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/ctr/cpu.stat", "usage_usec 2500\nuser_usec 1\n")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/ctr/cpuset.cpus.effective", "0-7")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/memory.max", "524288000")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/memory.current", "300000000")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/memory.stat", "anon 1\ninactive_file 50000000\nsock 40000000\n")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max", "max")
        .file("sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.current", "1");
    let r = t.reader(0.0);
    assert_eq!(r.layout(), Layout::V2);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 1.5, quota_set: true }, "the leaf's 1.5 is smaller than the pod's 4");
    assert_eq!(r.cpu_usage_nanos(), Some(2_500_000));
    assert_eq!(r.cpu_source(), CpuSource::CgroupQuota { path: "kubepods/burstable/pod1/ctr".into() });
    // The leaf says max; the pod's 500 MiB binds and its usage is what counts. v2 charges
    // socket buffers to the cgroup and says how much in `sock`.
    assert_eq!(r.memory(), Some(MemoryReading { working_set: 250_000_000, limit: Some(524_288_000), sock: Some(40_000_000) }));
    assert!(r.paths().iter().any(|(c, _, p)| c == "memory" && p.ends_with("pod1/ctr")));
}

#[test]
fn v2_private_namespace_reads_the_mount_root() {
    let t = Tree::new();
    // Inside a container with cgroupns=private: /proc/self/cgroup says "/".
    t.file("proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n")
        .file("proc/self/cgroup", "0::/\n")
        .file("sys/fs/cgroup/cgroup.controllers", "cpu memory")
        .file("sys/fs/cgroup/cpu.max", "50000 100000")
        .file("sys/fs/cgroup/cpu.stat", "usage_usec 10\n")
        .file("sys/fs/cgroup/cpuset.cpus.effective", "0-1")
        .file("sys/fs/cgroup/memory.max", "314572800")
        .file("sys/fs/cgroup/memory.current", "100")
        .file("sys/fs/cgroup/memory.stat", "inactive_file 0\n");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 0.5, quota_set: true });
    assert_eq!(r.memory().unwrap().limit, Some(314_572_800));
}

#[test]
fn v2_leaf_not_visible_falls_back_to_mount_root() {
    let t = Tree::new();
    // Host-namespace path that is not visible under this mount (bind-mounted leaf).
    t.file("proc/self/mountinfo", "30 23 0:26 /kubepods/pod9/ctr /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n")
        .file("proc/self/cgroup", "0::/kubepods/pod9/ctr\n")
        .file("sys/fs/cgroup/cgroup.controllers", "cpu memory")
        .file("sys/fs/cgroup/cpu.max", "200000 100000")
        .file("sys/fs/cgroup/cpu.stat", "usage_usec 10\n")
        .file("sys/fs/cgroup/cpuset.cpus.effective", "0-3");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 2.0, quota_set: true });
    assert_eq!(r.cpu_usage_nanos(), Some(10_000));
}

#[test]
fn hybrid_uses_v1_controllers() {
    let t = Tree::new();
    let mountinfo = format!("{V1_MOUNTINFO}41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    t.file("proc/self/mountinfo", &mountinfo)
        .file("proc/self/cgroup", "4:memory:/app\n3:cpuset:/\n2:cpu,cpuacct:/app\n0::/app\n")
        .file("sys/fs/cgroup/unified/cgroup.controllers", "")
        .file("sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_quota_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/app/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpu,cpuacct/app/cpuacct.usage", "42")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "0-1")
        .file("sys/fs/cgroup/memory/app/memory.limit_in_bytes", "209715200")
        .file("sys/fs/cgroup/memory/app/memory.usage_in_bytes", "104857600")
        .file("sys/fs/cgroup/memory/app/memory.stat", "total_inactive_file 0\n");
    let r = t.reader(0.0);
    assert_eq!(r.layout(), Layout::Hybrid);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 1.0, quota_set: true });
    assert_eq!(r.cpu_usage_nanos(), Some(42));
    assert_eq!(r.memory(), Some(MemoryReading { working_set: 104_857_600, limit: Some(209_715_200), sock: None }));
}

#[test]
fn no_mountinfo_guesses_the_layout() {
    let t = Tree::new();
    t.file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "50000")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "0");
    let r = t.reader(0.0);
    assert_eq!(r.layout(), Layout::V1);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 0.5, quota_set: true });
    let empty = Tree::new();
    let r = empty.reader(0.0);
    assert_eq!(r.layout(), Layout::None);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 1.0, quota_set: false });
    assert_eq!(r.memory(), None);
}

/// Nothing binds: a laptop or a plain host, weir in a cgroup shared with everything else.
/// The usage of that cgroup is everyone's, so weir's own CPU time is read, against the
/// CPUs there are. (Read against them, the shared cgroup's usage would count a busy
/// neighbour's load as weir's.)
#[test]
fn no_limit_anywhere_reads_the_process() {
    let t = Tree::new();
    t.file("proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
        .file("proc/self/cgroup", "0::/user.slice/session-1.scope\n")
        .file("proc/self/stat", "4242 (weir (x)) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 8 0 1 2 3\n")
        .file("sys/devices/system/cpu/online", "0-3")
        .file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory")
        .file("sys/fs/cgroup/cpu.stat", "usage_usec 999999999\n")
        .file("sys/fs/cgroup/cpuset.cpus.effective", "0-3")
        .file("sys/fs/cgroup/user.slice/cpu.max", "max 100000")
        .file("sys/fs/cgroup/user.slice/cpu.stat", "usage_usec 888888888\n")
        .file("sys/fs/cgroup/user.slice/session-1.scope/cpu.stat", "usage_usec 777777777\n");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_source(), CpuSource::Process);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 4.0, quota_set: false });
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert_eq!(r.cpu_usage_nanos(), Some(200 * (1_000_000_000 / hz)), "utime + stime of proc/self/stat, not any cgroup's usage");
    assert_eq!(t.reader(1.5).cpu_capacity().cores, 1.5, "a configured fallback still sets the capacity");
}

/// A cpuset narrower than the machine, set by the pod, binds with no quota anywhere: the
/// pod's usage against the pod's CPUs.
#[test]
fn v1_cpuset_narrower_than_the_machine_binds() {
    let t = Tree::new();
    t.file("proc/self/mountinfo", V1_MOUNTINFO)
        .file("proc/self/cgroup", "2:cpu,cpuacct:/pod/c1\n3:cpuset:/pod/c1\n")
        .file("sys/devices/system/cpu/online", "0-15")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1")
        .file("sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "1")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/cpuacct.usage", "2")
        .file("sys/fs/cgroup/cpu,cpuacct/pod/c1/cpuacct.usage", "3")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "0-15")
        .file("sys/fs/cgroup/cpuset/pod/cpuset.cpus", "4-7")
        .file("sys/fs/cgroup/cpuset/pod/c1/cpuset.cpus", "4-7");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_source(), CpuSource::CgroupCpuset { path: "pod".into() });
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 4.0, quota_set: true });
    assert_eq!(r.cpu_usage_nanos(), Some(2), "the pod's usage, where its cpuset is set");

    // The same cpuset as the machine: nothing binds, the process is read.
    let t = Tree::new();
    t.file("proc/self/mountinfo", V1_MOUNTINFO)
        .file("proc/self/cgroup", "2:cpu,cpuacct:/\n3:cpuset:/\n")
        .file("proc/self/stat", "1 (weir) S 1 2 3 4 5 6 7 8 9 10 1 1 0 0 20 0 8 0 1 2 3\n")
        .file("sys/devices/system/cpu/online", "0-3")
        .file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1")
        .file("sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "123456789")
        .file("sys/fs/cgroup/cpuset/cpuset.cpus", "0-3");
    let r = t.reader(0.0);
    assert_eq!(r.cpu_source(), CpuSource::Process);
    assert_eq!(r.cpu_capacity(), CpuCapacity { cores: 4.0, quota_set: false });
}

#[test]
fn cpuset_lists() {
    assert_eq!(parse_cpuset("0-3,8,10-11"), Some(7));
    assert_eq!(parse_cpuset("5"), Some(1));
    assert_eq!(parse_cpuset("0-1\n"), Some(2));
    assert_eq!(parse_cpuset(""), None);
    assert_eq!(parse_cpuset("3-1"), None);
    assert_eq!(parse_cpuset("a-b"), None);
}

/// The real machine: the figures must agree with /proc and nproc.
#[test]
fn real_machine_agrees_with_proc_and_nproc() {
    let r = CgroupReader::discover(Path::new("/"), 0.0);
    let nproc = std::thread::available_parallelism().unwrap().get() as f64;
    let cap = r.cpu_capacity();
    assert!(cap.cores > 0.0 && cap.cores <= nproc, "{cap:?} vs nproc {nproc}");
    if !cap.quota_set {
        assert_eq!(cap.cores, nproc, "no quota: the CPUs we may run on");
    }
    if r.layout() != Layout::None {
        let a = r.cpu_usage_nanos().expect("cpu usage readable");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = r.cpu_usage_nanos().unwrap();
        assert!(b >= a, "usage is monotonic");
        let mem = r.memory().expect("memory readable");
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
        let total_kb: u64 =
            meminfo.lines().find(|l| l.starts_with("MemTotal:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
        // Our own cgroup holds at least this test process's resident memory.
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let rss_kb: u64 = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(mem.working_set <= total_kb * 1024 + (1 << 30), "{mem:?}");
        assert!(mem.working_set + mem.working_set / 2 >= rss_kb * 1024 / 4, "{mem:?} rss {rss_kb} kB");
        if let Some(limit) = mem.limit {
            assert!(limit > 0);
        }
    }
}
