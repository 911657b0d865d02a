//! A weir as a real child process (the binary cargo built for the tests), on free
//! loopback ports, with its log in a file: for tests that kill, restart or run several.

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// One weir process. `{http}`, `{grpc}` and `{admin}` in its YAML become its ports.
pub struct Proc {
    pub child: Option<Child>,
    pub config: PathBuf,
    pub log: PathBuf,
    pub http: u16,
    pub admin: u16,
    /// The YAML with its port placeholders, to pick other ports if one was taken.
    template: String,
    /// Once ready, a restart keeps its ports (others may have been told them).
    was_ready: bool,
}

impl Proc {
    pub fn new(dir: &Path, name: &str, yaml: &str) -> Proc {
        let config = dir.join(format!("{name}.yaml"));
        let mut p = Proc {
            child: None,
            config,
            log: dir.join(format!("{name}.log")),
            http: 0,
            admin: 0,
            template: yaml.to_string(),
            was_ready: false,
        };
        p.pick_ports();
        p
    }

    /// Fills the placeholders with free ports and writes the config.
    fn pick_ports(&mut self) {
        let (http, grpc, admin) = (free_port(), free_port(), free_port());
        let yaml = self
            .template
            .replace("{http}", &format!("127.0.0.1:{http}"))
            .replace("{grpc}", &format!("127.0.0.1:{grpc}"))
            .replace("{admin}", &format!("127.0.0.1:{admin}"));
        std::fs::write(&self.config, yaml).unwrap();
        (self.http, self.admin) = (http, admin);
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Starts the process without waiting for it to be ready.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--config", self.config.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("weir starts");
        self.child = Some(child);
    }

    pub async fn start(&mut self) {
        self.spawn();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tries = 0;
        loop {
            if let Ok(r) = reqwest::get(format!("{}/readyz", self.admin())).await {
                if r.status() == 200 {
                    self.was_ready = true;
                    return;
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                // A free port can be taken by another test between the pick and weir's bind:
                // a first start picks others.
                if !self.was_ready && tries < 5 && self.log_text().contains("Address already in use") {
                    tries += 1;
                    self.pick_ports();
                    self.spawn();
                    continue;
                }
                panic!("weir exited early ({status}):\n{}", self.log_text());
            }
            assert!(Instant::now() < deadline, "weir not ready:\n{}", self.log_text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for the exit (bounded).
    pub async fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                assert!(status.success(), "weir exited with {status}:\n{}", self.log_text());
                return;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("weir did not stop within 30 s of SIGTERM:\n{}", self.log_text());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn rss_kb(&self) -> u64 {
        let Some(c) = self.child.as_ref() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{}/status", c.id())).unwrap_or_default();
        status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
    }
}

/// The last 4 KB of a log.
pub fn tail(log: &str) -> &str {
    let mut from = log.len().saturating_sub(4000);
    while !log.is_char_boundary(from) {
        from += 1;
    }
    &log[from..]
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}
