//! Creates a real CPU- and memory-limited cgroup (v1, v2 or hybrid) and runs a command
//! inside it. Used by the end-to-end throttle tests; requires root and a writable
//! cgroupfs, and fails loudly (never skips) when those are missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A cgroup made for one test; removed on drop (after its processes are gone).
pub struct TestCgroup {
    /// Directories created (one per v1 hierarchy, or one for v2).
    pub dirs: Vec<PathBuf>,
    /// `cgroup.procs` files to join.
    procs: Vec<PathBuf>,
    /// Layout name for messages.
    pub layout: &'static str,
}

fn write(path: &Path, value: &str) {
    std::fs::write(path, value)
        .unwrap_or_else(|e| panic!("cannot write {value:?} to {}: {e} (the e2e test needs root and a writable cgroupfs)", path.display()));
}

fn v1_mount(controller: &str) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let post: Vec<&str> = post.split_whitespace().collect();
        (post.first() == Some(&"cgroup") && post.get(2)?.split(',').any(|o| o == controller))
            .then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap()))
    })
}

impl TestCgroup {
    /// `cpus` cores of quota and `mem_bytes` of memory.
    pub fn create(name: &str, cpus: f64, mem_bytes: u64) -> TestCgroup {
        let unique = format!("{name}-{}", std::process::id());
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            // Pure v2.
            let root = PathBuf::from("/sys/fs/cgroup");
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu +memory +cpuset");
            let dir = root.join(&unique);
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            write(&dir.join("cpu.max"), &format!("{} 100000", (cpus * 100_000.0) as u64));
            write(&dir.join("memory.max"), &mem_bytes.to_string());
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            return TestCgroup { procs: vec![dir.join("cgroup.procs")], dirs: vec![dir], layout: "v2" };
        }
        // v1 or hybrid: join every controller a container runtime would use.
        let mut dirs = Vec::new();
        let mut procs = Vec::new();
        for controller in ["cpu", "cpuacct", "cpuset", "memory"] {
            let mount = v1_mount(controller).unwrap_or_else(|| panic!("no v1 mount for {controller}"));
            let dir = mount.join(&unique);
            if dirs.contains(&dir) {
                continue;
            }
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            if controller == "cpuset" || mount.join("cpuset.cpus").exists() {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = std::fs::read_to_string(mount.join(f)).unwrap();
                    write(&dir.join(f), parent.trim());
                }
            }
            if dir.join("cpu.cfs_quota_us").exists() {
                write(&dir.join("cpu.cfs_period_us"), "100000");
                write(&dir.join("cpu.cfs_quota_us"), &((cpus * 100_000.0) as u64).to_string());
            }
            if dir.join("memory.limit_in_bytes").exists() {
                write(&dir.join("memory.limit_in_bytes"), &mem_bytes.to_string());
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), mem_bytes.to_string());
            }
            procs.push(dir.join("cgroup.procs"));
            dirs.push(dir);
        }
        let layout = if Path::new("/sys/fs/cgroup/unified").exists() { "hybrid" } else { "v1" };
        TestCgroup { dirs, procs, layout }
    }

    /// Spawns `program args` already inside the cgroup (the shell joins, then execs).
    pub fn spawn(&self, program: &Path, args: &[&str], log: &Path) -> Child {
        let joins: String = self.procs.iter().map(|p| format!("echo $$ > '{}' && ", p.display())).collect();
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let script = format!("{joins}exec '{}' {}", program.display(), quoted.join(" "));
        let log = std::fs::File::create(log).unwrap();
        Command::new("sh").arg("-c").arg(script).stdout(log.try_clone().unwrap()).stderr(log).stdin(Stdio::null()).spawn().unwrap()
    }

    /// The `memory.events` / `memory.oom_control` OOM-kill count, when readable.
    pub fn oom_kills(&self) -> u64 {
        for d in &self.dirs {
            for f in ["memory.events", "memory.oom_control"] {
                if let Ok(t) = std::fs::read_to_string(d.join(f)) {
                    if let Some(n) = t.lines().find_map(|l| l.strip_prefix("oom_kill ")) {
                        return n.trim().parse().unwrap_or(0);
                    }
                }
            }
        }
        0
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
