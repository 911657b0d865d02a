//! The quota store against Redis as managed services run it: TLS (`rediss://`, a CA file
//! and a client certificate made here with openssl) and an ACL user, on a real
//! `redis-server` (Debian's build speaks TLS). A wrong password and an untrusted
//! certificate each give one clear log line, the fallback and the metrics, and weir keeps
//! serving: never a crash or a hang.
//!
//! Needs `redis-server` and `openssl` (`scripts/test.sh` installs redis-server; openssl
//! comes with it).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::process::Proc;
use support::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a certificate it signed (for `localhost` and 127.0.0.1), as PEM files.
fn ca_and_cert(dir: &Path, ca: &str, name: &str) {
    if !dir.join(format!("{ca}.crt")).exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ],
        );
    }
    std::fs::write(dir.join(format!("{name}.ext")), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// redis-server with TLS only, client certificates optional, and one ACL user
/// (`weir` / `pw-right`); the default user is off.
fn redis_tls(dir: &Path, port: u16) -> Redis {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    std::fs::write(dir.join("users.acl"), "user weir on >pw-right ~* &* +@all\nuser default off\n").unwrap();
    let child = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--tls-cert-file", &p("server.crt"), "--tls-key-file", &p("server.key"), "--tls-ca-cert-file", &p("ca.crt")])
        .args(["--tls-auth-clients", "optional", "--aclfile", &p("users.acl")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs (apt-get install redis-server)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen on its TLS port");
        std::thread::sleep(Duration::from_millis(50));
    }
    Redis(child)
}

fn yaml(url: &str, ca: &Path, client: Option<(&Path, &Path)>) -> String {
    let client = client.map_or(String::new(), |(c, k)| format!(", cert_file: \"{}\", key_file: \"{}\"", c.display(), k.display()));
    format!(
        r#"receiver:
  http_server: {{endpoint: "{{http}}"}}
  grpc_server: {{endpoint: "{{grpc}}"}}
  auth:
    tenants:
      acme: {{tokens: [tok-acme], rate: {{requests_per_second: 100, burst: 10}}}}
    quota_store:
      type: redis
      url: "{url}"
      sync_interval: 100ms
      tls: {{ca_file: "{}"{client}}}
  throttle: {{enabled: false}}
exporters: [{{type: blackhole}}]
admin: {{endpoint: "{{admin}}"}}
log: {{level: info}}
"#,
        ca.display()
    )
}

async fn metric(w: &Proc, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", w.admin())).await.ok()?.text().await.ok()?;
    text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' ')).and_then(|l| l.split_whitespace().last()?.parse().ok())
}

async fn wait_metric(w: &Proc, name: &str, want: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(w, name).await;
        if let Some(v) = v.filter(|v| want(*v)) {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {v:?}\n{}", w.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn still_serves(w: &Proc) {
    let started = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/logs", w.url()))
        .bearer_auth("tok-acme")
        .header("content-type", "application/json")
        .body(r#"{"resourceLogs":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(2), "a request waited on the store: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_store_speaks_tls_to_an_acl_user_and_fails_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ca_and_cert(d, "ca", "server");
    ca_and_cert(d, "ca", "client");
    ca_and_cert(d, "other-ca", "stranger");
    let port = free_port();
    let _redis = redis_tls(d, port);
    let f = |n: &str| -> PathBuf { d.join(n) };

    // TLS with the right CA, a client certificate and the ACL user: the store is up.
    let url = format!("rediss://weir:pw-right@127.0.0.1:{port}/0");
    let mut good = Proc::new(d, "good", &yaml(&url, &f("ca.crt"), Some((&f("client.crt"), &f("client.key")))));
    good.start().await;
    wait_metric(&good, "weir_quota_store_up", |v| v == 1.0).await;
    assert_eq!(wait_metric(&good, "weir_quota_store_replicas", |v| v >= 1.0).await, 1.0);
    still_serves(&good).await;
    good.stop().await;
    assert!(!good.log_text().contains("pw-right"), "the password never reaches the log");

    // A wrong password, and a server certificate from a CA weir does not trust: each is
    // the fallback, the error counted, one clear line saying why, and weir still serving.
    let wrong = format!("rediss://weir:pw-wrong@127.0.0.1:{port}/0");
    fails_plainly(d, "wrong", &yaml(&wrong, &f("ca.crt"), None), &["wrongpass", "auth"]).await;
    let right = format!("rediss://weir:pw-right@127.0.0.1:{port}/0");
    fails_plainly(d, "untrusted", &yaml(&right, &f("other-ca.crt"), None), &["certificate"]).await;
}

/// Starts a weir whose store cannot be used and checks what it does about it: `why` are
/// words one of which the log line must hold (lower case).
async fn fails_plainly(dir: &Path, name: &str, yaml: &str, why: &[&str]) {
    let mut w = Proc::new(dir, name, yaml);
    w.start().await;
    wait_metric(&w, "weir_quota_store_sync_errors_total", |v| v >= 3.0).await;
    assert_eq!(metric(&w, "weir_quota_store_up").await, Some(0.0));
    still_serves(&w).await;
    w.stop().await;
    let log = w.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("quota store unreachable")).collect();
    assert_eq!(lines.len(), 1, "{name}: one line, not one per sync:\n{log}");
    let line = lines[0].to_lowercase();
    assert!(why.iter().any(|w| line.contains(w)), "{name}: the line says why: {}", lines[0]);
    assert!(!log.contains("pw-wrong") && !log.contains("pw-right"), "{name}: the password never reaches the log");
}
