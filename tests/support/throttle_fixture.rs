//! A fixture cgroup tree the throttle tests rewrite while weir runs, and helpers around it.

use std::path::Path;
use std::time::Duration;

/// A v2 fixture: 1 CPU quota, 1000-byte memory limit, memory.current set by the test.
pub fn fixture(root: &Path, mem_current: u64) {
    let w = |rel: &str, content: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    };
    w("proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    w("proc/self/cgroup", "0::/\n");
    w("sys/fs/cgroup/cgroup.controllers", "cpu memory");
    w("sys/fs/cgroup/cpu.max", "100000 100000");
    w("sys/fs/cgroup/cpu.stat", "usage_usec 0\n");
    w("sys/fs/cgroup/cpuset.cpus.effective", "0");
    w("sys/fs/cgroup/memory.max", "1000");
    w("sys/fs/cgroup/memory.stat", "inactive_file 0\n");
    w("sys/fs/cgroup/memory.current.tmp", &mem_current.to_string());
    std::fs::rename(root.join("sys/fs/cgroup/memory.current.tmp"), root.join("sys/fs/cgroup/memory.current")).unwrap();
}

pub fn yaml(cgroup_root: &Path, rules: &str) -> String {
    // The fixture's memory limit is a few bytes, so the lines must stay as written: no
    // headroom in bytes lowers them.
    let rules = if rules.contains("\n    thresholds:\n") {
        rules.replacen("\n    thresholds:\n", "\n    thresholds:\n      mem_headroom_bytes: 0\n", 1)
    } else {
        format!("{rules}\n    thresholds: {{mem_headroom_bytes: 0}}")
    };
    let base = super::base_yaml(
        Path::new("{dir}"),
        &format!(
            "  throttle:\n    enabled: true\n    sample_interval: 20ms\n    cgroup_root: \"{}\"\n    rules:\n{rules}\n",
            cgroup_root.display()
        ),
    );
    base.replace("[\"logging\", \"content_decompressor\"]", "[\"logging\", \"content_decompressor\", \"throttle\"]")
}

pub async fn wait_state(admin: &str, record_type: &str, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v: serde_json::Value = reqwest::get(format!("{admin}/debug/throttle")).await.unwrap().json().await.unwrap();
        if v["states"][record_type] == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "state of {record_type} never became {want}: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn post(url: &str, body: Vec<u8>, gzip: bool) -> reqwest::Response {
    let mut r = reqwest::Client::new().post(url).header("content-type", "application/x-protobuf").body(body);
    if gzip {
        r = r.header("content-encoding", "gzip");
    }
    r.send().await.unwrap()
}
