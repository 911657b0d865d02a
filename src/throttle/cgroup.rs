//! Reads the container's CPU and memory capacity and usage from cgroup v1, v2 or a
//! hybrid of both.
//!
//! Discovery: the cgroup mounts come from `<root>/proc/self/mountinfo` (falling back to
//! the usual `/sys/fs/cgroup` layout), our own cgroup paths from `<root>/proc/self/cgroup`.
//! For each controller the reader keeps the chain of directories from our own cgroup up
//! to the controller's mount root. Limits are the smallest along the chain, because the
//! kernel enforces the strictest ancestor: a leaf that says `max` under a limited pod is
//! read right. With a private cgroup namespace the chain is just the mount root, which
//! *is* the container's cgroup. Usage is read where the binding limit sits (that is where
//! the kernel throttles or OOM-kills).
//!
//! CPU usage and CPU capacity always come from the same place ([`CpuSource`]): where a
//! quota or a cpuset narrower than the machine binds, the usage of the cgroup that sets
//! it against that limit; where nothing binds (a laptop, a systemd service without
//! `CPUQuota`, a shared pod without limits), weir's own CPU time against the CPUs it may
//! run on. A shared cgroup's usage is everyone's, so read against weir's own CPUs it would
//! count a busy neighbour's load as weir's.
//!
//! `root` is the filesystem root (`/` in production), so tests run on fixture trees.

use std::fs;
use std::path::{Path, PathBuf};

/// v1 memory limits at or above this are the kernel's "unlimited" sentinel
/// (PAGE_COUNTER_MAX pages, 9223372036854771712 on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

/// Which hierarchy a controller lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// cgroup v1 (one hierarchy per controller or controller group).
    V1,
    /// cgroup v2 (unified).
    V2,
}

/// The machine's layout as seen from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Only v1 controllers.
    V1,
    /// Only the unified hierarchy.
    V2,
    /// v1 controllers with a v2 hierarchy mounted beside them.
    Hybrid,
    /// No cgroup filesystem found: CPU falls back to `fallback_cores`, memory is invalid.
    None,
}

/// One level of a controller's chain.
#[derive(Debug, Clone)]
struct Level {
    /// Path relative to the mount root ("" for the root itself).
    rel: String,
    dir: PathBuf,
}

/// A controller: its version and directories from our cgroup (first) to the mount root.
#[derive(Debug, Clone)]
struct Controller {
    version: Version,
    chain: Vec<Level>,
}

/// CPU capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuCapacity {
    /// The binding limit in cores (quota/period or cpuset CPUs, fractional); without one,
    /// the fallback or the CPUs weir may run on.
    pub cores: f64,
    /// Whether a cgroup limit (quota or cpuset) binds.
    pub quota_set: bool,
}

/// Where the CPU water level's usage and capacity are read, both from the same place.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CpuSource {
    /// A CFS quota binds: the usage of the cgroup that sets it (`path`, relative to the
    /// controller's mount), against the quota.
    CgroupQuota {
        /// The cgroup, relative to the controller's mount.
        path: String,
    },
    /// A cpuset narrower than the machine binds: the usage of the cgroup that sets it,
    /// against its CPUs.
    CgroupCpuset {
        /// The cgroup, relative to the controller's mount.
        path: String,
    },
    /// No cgroup limit binds, or weir's CPU affinity is narrower than the one that does:
    /// weir's own CPU time, against the CPUs it may run on.
    Process,
}

/// Where one CPU reading comes from.
#[derive(Debug)]
struct CpuPlan {
    cores: f64,
    source: CpuSource,
    /// The cgroup directory whose usage counts, and its version; `None` for the process.
    usage_dir: Option<(PathBuf, Version)>,
}

/// Memory figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryReading {
    /// max(0, usage − inactive_file).
    pub working_set: u64,
    /// The smallest limit along the chain; `None` when unlimited.
    pub limit: Option<u64>,
    /// Socket buffers charged to the cgroup (`sock` in a v2 `memory.stat`), part of
    /// `working_set`. `None` under v1, which does not charge them to the container.
    pub sock: Option<u64>,
}

/// The cgroup reader.
#[derive(Debug, Clone)]
pub struct CgroupReader {
    layout: Layout,
    cpu: Option<Controller>,
    cpuacct: Option<Controller>,
    cpuset: Option<Controller>,
    memory: Option<Controller>,
    /// CPUs this process may run on (affinity), when known (production root only).
    affinity_cpus: Option<usize>,
    fallback_cores: f64,
    /// The filesystem root everything is read under.
    root: PathBuf,
}

#[derive(Debug)]
struct Mount {
    root: String,
    point: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

/// The CPU time this process has used, from its clock (one system call, no file read).
pub fn process_cpu_nanos() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Parses a cpuset list such as `0-3,8,10-11` into a CPU count.
pub fn parse_cpuset(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?);
                if b < a {
                    return None;
                }
                n += b - a + 1;
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

fn parse_mountinfo(text: &str, root: &Path) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let fstype = post[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let point = root.join(pre[4].trim_start_matches('/'));
        let controllers = if fstype == "cgroup" {
            post[2].split(',').filter(|o| matches!(*o, "cpu" | "cpuacct" | "cpuset" | "memory")).map(str::to_string).collect()
        } else {
            Vec::new()
        };
        mounts.push(Mount { root: pre[3].to_string(), point, v2: fstype == "cgroup2", controllers });
    }
    mounts
}

/// Guesses mounts from the directory layout when mountinfo is unavailable.
fn guess_mounts(root: &Path) -> Vec<Mount> {
    let base = root.join("sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![Mount { root: "/".into(), point: base, v2: true, controllers: vec![] }];
    }
    let mut mounts = Vec::new();
    for (dir, ctrls) in [
        ("cpu,cpuacct", &["cpu", "cpuacct"][..]),
        ("cpu", &["cpu"][..]),
        ("cpuacct", &["cpuacct"][..]),
        ("cpuset", &["cpuset"][..]),
        ("memory", &["memory"][..]),
    ] {
        let point = base.join(dir);
        if point.is_dir() && !mounts.iter().any(|m: &Mount| ctrls.iter().any(|c| m.controllers.iter().any(|x| x == c))) {
            mounts.push(Mount { root: "/".into(), point, v2: false, controllers: ctrls.iter().map(|s| s.to_string()).collect() });
        }
    }
    if base.join("unified/cgroup.controllers").exists() {
        mounts.push(Mount { root: "/".into(), point: base.join("unified"), v2: true, controllers: vec![] });
    }
    mounts
}

/// `/proc/self/cgroup`: (controllers, path) per line; v2 has empty controllers.
fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            let ctrls = it.next()?;
            let path = it.next()?;
            Some((ctrls.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect(), path.to_string()))
        })
        .collect()
}

fn build_chain(mount: &Mount, own_path: Option<&str>) -> Vec<Level> {
    // Our path relative to this mount's root; if it is not under it (or unknown), the
    // mount root is all we can see.
    let rel = own_path
        .and_then(|p| {
            let r = mount.root.trim_end_matches('/');
            if r.is_empty() {
                Some(p.trim_start_matches('/').to_string())
            } else {
                p.strip_prefix(r).map(|s| s.trim_start_matches('/').to_string())
            }
        })
        .unwrap_or_default();
    let mut rel = if mount.point.join(&rel).is_dir() { rel } else { String::new() };
    let mut chain = Vec::new();
    loop {
        chain.push(Level { dir: mount.point.join(&rel), rel: rel.clone() });
        if rel.is_empty() {
            break;
        }
        rel = match rel.rfind('/') {
            Some(i) => rel[..i].to_string(),
            None => String::new(),
        };
    }
    chain
}

impl CgroupReader {
    /// Discovers the cgroups of this process under `root`. `fallback_cores` is used when
    /// no CPU quota is set; 0 means "the CPUs this process may run on".
    pub fn discover(root: &Path, fallback_cores: f64) -> CgroupReader {
        let mut mounts = fs::read_to_string(root.join("proc/self/mountinfo")).map(|t| parse_mountinfo(&t, root)).unwrap_or_default();
        if mounts.is_empty() {
            mounts = guess_mounts(root);
        }
        let own = fs::read_to_string(root.join("proc/self/cgroup")).map(|t| parse_proc_cgroup(&t)).unwrap_or_default();
        let v2_path = own.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| p.as_str());
        let v2_mount = mounts.iter().find(|m| m.v2);
        let find = |name: &str| -> Option<Controller> {
            if let Some(m) = mounts.iter().find(|m| !m.v2 && m.controllers.iter().any(|c| c == name)) {
                let own_path = own.iter().find(|(c, _)| c.iter().any(|x| x == name)).map(|(_, p)| p.as_str());
                return Some(Controller { version: Version::V1, chain: build_chain(m, own_path) });
            }
            // Otherwise the unified hierarchy; a controller that is not enabled there
            // simply has no files, and its reading is then unavailable.
            v2_mount.map(|m| Controller { version: Version::V2, chain: build_chain(m, v2_path) })
        };
        let cpu = find("cpu");
        let cpuacct = find("cpuacct");
        let cpuset = find("cpuset");
        let memory = find("memory");
        let has_v1 = mounts.iter().any(|m| !m.v2);
        let layout = match (has_v1, v2_mount.is_some()) {
            (true, true) => Layout::Hybrid,
            (true, false) => Layout::V1,
            (false, true) => Layout::V2,
            (false, false) => Layout::None,
        };
        let affinity_cpus = if root == Path::new("/") { affinity_cpus() } else { None };
        CgroupReader { layout, cpu, cpuacct, cpuset, memory, affinity_cpus, fallback_cores, root: root.to_path_buf() }
    }

    /// The detected layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Every directory the reader consults, for `/debug/throttle`.
    pub fn paths(&self) -> Vec<(String, Version, String)> {
        let mut out = Vec::new();
        for (name, c) in [("cpu", &self.cpu), ("cpuacct", &self.cpuacct), ("cpuset", &self.cpuset), ("memory", &self.memory)] {
            if let Some(c) = c {
                for l in &c.chain {
                    out.push((name.to_string(), c.version, l.dir.display().to_string()));
                }
            }
        }
        out
    }

    /// The CPUs of our cpuset (nearest level that says) and the topmost level of the
    /// chain that already has that few: the cgroup that sets the limit.
    fn cgroup_cpuset(&self) -> Option<(usize, String)> {
        let c = self.cpuset.as_ref()?;
        let files: &[&str] = match c.version {
            Version::V1 => &["cpuset.effective_cpus", "cpuset.cpus"],
            Version::V2 => &["cpuset.cpus.effective", "cpuset.cpus"],
        };
        let count = |l: &Level| files.iter().find_map(|f| read_trim(&l.dir.join(f)).and_then(|s| parse_cpuset(&s)));
        let n = c.chain.iter().find_map(count)?;
        let rel = c.chain.iter().rev().find(|l| count(l).is_some_and(|m| m <= n)).map_or_else(String::new, |l| l.rel.clone());
        Some((n, rel))
    }

    /// The machine's online CPUs, when known.
    fn machine_cpus(&self) -> Option<usize> {
        read_trim(&self.root.join("sys/devices/system/cpu/online")).and_then(|s| parse_cpuset(&s))
    }

    /// Decides where CPU usage and capacity are read (see [`CpuSource`]).
    fn cpu_plan(&self) -> CpuPlan {
        let quota = self.quota();
        let cpuset = self.cgroup_cpuset();
        let machine = self.machine_cpus();
        // A cpuset binds when it is narrower than the machine; with the machine unknown
        // (fixture trees), when it is narrower than the quota.
        let cpuset_binds = cpuset.clone().filter(|(n, _)| match machine {
            Some(m) => *n < m,
            None => quota.as_ref().is_some_and(|(q, _)| (*n as f64) < *q),
        });
        let binding = match (quota, cpuset_binds) {
            (Some((q, _)), Some((n, crel))) if (n as f64) < q => Some((n as f64, CpuSource::CgroupCpuset { path: crel })),
            (Some((q, rel)), _) => Some((q, CpuSource::CgroupQuota { path: rel })),
            (None, Some((n, rel))) => Some((n as f64, CpuSource::CgroupCpuset { path: rel })),
            (None, None) => None,
        };
        // No more cores than there are CPUs to run on (a quota of 8 on a 2-CPU cpuset).
        let ceiling = cpuset.as_ref().map(|(n, _)| *n).or(machine).map_or(f64::INFINITY, |n| n as f64);
        let process = |cores: f64| CpuPlan { cores, source: CpuSource::Process, usage_dir: None };
        if let Some(aff) = self.affinity_cpus {
            // Pinned narrower than the cgroup's limit: the cgroup's usage includes CPUs
            // weir cannot run on, so only weir's own time matches the denominator.
            if binding.as_ref().is_none_or(|(cores, _)| (aff as f64) < cores.min(ceiling)) {
                let cores = if self.fallback_cores > 0.0 { self.fallback_cores } else { aff as f64 };
                return process(cores);
            }
        }
        match binding {
            Some((cores, source)) => {
                let rel = match &source {
                    CpuSource::CgroupQuota { path } | CpuSource::CgroupCpuset { path } => path.as_str(),
                    CpuSource::Process => "",
                };
                let cores = cores.min(ceiling);
                let dir = self.cpuacct.as_ref().and_then(|c| c.chain.iter().find(|l| l.rel == rel).map(|l| (l.dir.clone(), c.version)));
                match dir {
                    Some(dir) => CpuPlan { cores, source, usage_dir: Some(dir) },
                    // The limiting cgroup is not visible in the accounting hierarchy
                    // (v1 hierarchies can differ): weir's own time is what is left.
                    None => process(cores),
                }
            }
            None => {
                let cores =
                    if self.fallback_cores > 0.0 { self.fallback_cores } else { cpuset.map(|(n, _)| n).or(machine).unwrap_or(1) as f64 };
                process(cores)
            }
        }
    }

    /// The binding quota in cores and the level relative path where it sits.
    fn quota(&self) -> Option<(f64, String)> {
        let c = self.cpu.as_ref()?;
        let mut best: Option<(f64, String)> = None;
        for l in &c.chain {
            let q = match c.version {
                Version::V1 => {
                    let quota = read_trim(&l.dir.join("cpu.cfs_quota_us")).and_then(|s| s.parse::<i64>().ok());
                    let period = read_trim(&l.dir.join("cpu.cfs_period_us")).and_then(|s| s.parse::<i64>().ok());
                    match (quota, period) {
                        (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
                        _ => None,
                    }
                }
                Version::V2 => read_trim(&l.dir.join("cpu.max")).and_then(|s| {
                    let mut it = s.split_whitespace();
                    let q = it.next()?.parse::<f64>().ok()?;
                    let p = it.next().map_or(Some(100_000.0), |p| p.parse::<f64>().ok())?;
                    (q > 0.0 && p > 0.0).then_some(q / p)
                }),
            };
            if let Some(q) = q {
                if best.as_ref().is_none_or(|(b, _)| q < *b) {
                    best = Some((q, l.rel.clone()));
                }
            }
        }
        best
    }

    /// Effective cores: the binding limit (quota/period or cpuset CPUs), kept fractional.
    /// Without one, `fallback_cores`, or (when that is 0) the CPUs weir may run on.
    pub fn cpu_capacity(&self) -> CpuCapacity {
        let plan = self.cpu_plan();
        CpuCapacity { cores: plan.cores, quota_set: plan.source != CpuSource::Process }
    }

    /// Where CPU usage and capacity are read.
    pub fn cpu_source(&self) -> CpuSource {
        self.cpu_plan().source
    }

    /// Cumulative CPU time in nanoseconds, from the same place as [`Self::cpu_capacity`].
    pub fn cpu_usage_nanos(&self) -> Option<u64> {
        self.cpu_sample().1
    }

    /// Capacity and usage together, from one decision.
    pub fn cpu_sample(&self) -> (CpuCapacity, Option<u64>) {
        let plan = self.cpu_plan();
        let usage = match &plan.usage_dir {
            Some((dir, Version::V1)) => read_trim(&dir.join("cpuacct.usage")).and_then(|s| s.parse().ok()),
            Some((dir, Version::V2)) => {
                fs::read_to_string(dir.join("cpu.stat")).ok().and_then(|t| stat_field(&t, "usage_usec")).map(|us| us.saturating_mul(1000))
            }
            None => self.process_cpu_nanos(),
        };
        (CpuCapacity { cores: plan.cores, quota_set: plan.source != CpuSource::Process }, usage)
    }

    /// weir's own CPU time: the process clock on the real root, `proc/self/stat` (user +
    /// system ticks) under a fixture root.
    fn process_cpu_nanos(&self) -> Option<u64> {
        if self.root == Path::new("/") {
            return process_cpu_nanos();
        }
        let stat = fs::read_to_string(self.root.join("proc/self/stat")).ok()?;
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(ticks * (1_000_000_000 / hz))
    }

    /// Working set and limit, read where the smallest limit sits.
    pub fn memory(&self) -> Option<MemoryReading> {
        let c = self.memory.as_ref()?;
        let mut best: Option<(u64, &Level)> = None;
        for l in &c.chain {
            let limit = match c.version {
                Version::V1 => {
                    read_trim(&l.dir.join("memory.limit_in_bytes")).and_then(|s| s.parse::<u64>().ok()).filter(|v| *v < V1_UNLIMITED)
                }
                Version::V2 => read_trim(&l.dir.join("memory.max")).and_then(|s| s.parse::<u64>().ok()),
            };
            if let Some(v) = limit.filter(|v| *v > 0) {
                if best.is_none_or(|(b, _)| v < b) {
                    best = Some((v, l));
                }
            }
        }
        let level = best.map(|(_, l)| l).or_else(|| c.chain.first())?;
        // One read of memory.stat for every field: the sampler runs every 250 ms.
        let stat = fs::read_to_string(level.dir.join("memory.stat")).unwrap_or_default();
        let (usage, inactive, sock) = match c.version {
            Version::V1 => (
                read_trim(&level.dir.join("memory.usage_in_bytes")).and_then(|s| s.parse::<u64>().ok())?,
                stat_field(&stat, "total_inactive_file").or_else(|| stat_field(&stat, "inactive_file")).unwrap_or(0),
                None,
            ),
            Version::V2 => (
                read_trim(&level.dir.join("memory.current")).and_then(|s| s.parse::<u64>().ok())?,
                stat_field(&stat, "inactive_file").unwrap_or(0),
                Some(stat_field(&stat, "sock").unwrap_or(0)),
            ),
        };
        let working_set = usage.saturating_sub(inactive);
        Some(MemoryReading { working_set, limit: best.map(|(v, _)| v), sock: sock.map(|s| s.min(working_set)) })
    }
}

/// The CPUs this process may run on (`sched_getaffinity`; not the quota-aware figure
/// `available_parallelism` gives).
fn affinity_cpus() -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it for pid 0
    // (this thread, whose mask the process's threads inherit).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then(|| libc::CPU_COUNT(&set) as usize)
            .filter(|n| *n > 0)
    }
}

/// A field of a `memory.stat` text (`key value` lines).
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests;
