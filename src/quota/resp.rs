//! A minimal Redis client for the quota store: one connection, RESP2 commands as arrays
//! of bulk strings, replies parsed into [`Reply`]. The store sends one script call per
//! sync interval, so a pool, pipelining across tasks or cluster routing would buy
//! nothing; a client this small keeps every timeout in weir's hands.

use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A parsed reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// `:n`.
    Int(i64),
    /// `$n` bulk string (`None` for the nil bulk `$-1`).
    Bulk(Option<Vec<u8>>),
    /// `*n` array (`None` for the nil array `*-1`).
    Array(Option<Vec<Reply>>),
    /// `-ERR ...`: an error the server answered with.
    Error(String),
}

impl Reply {
    /// The reply as text (status, bulk or integer), for reading script results.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Int(n) => Some(n.to_string()),
            Reply::Bulk(Some(b)) => String::from_utf8(b.clone()).ok(),
            _ => None,
        }
    }
}

/// Where and how to connect, from a `redis://[user:password@]host:port[/db]` URL.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    /// `AUTH` arguments (user, password), if any.
    pub auth: Option<(Option<String>, String)>,
    /// `SELECT` database.
    pub db: u32,
}

impl Target {
    /// Parses the URL; the error names what is wrong with it.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url.strip_prefix("redis://").ok_or_else(|| {
            if url.starts_with("rediss://") {
                "`rediss://` (TLS) is not supported; reach Redis over a private network or a TLS sidecar".to_string()
            } else {
                format!("`{url}` must start with redis://")
            }
        })?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (creds, hostport) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        if hostport.is_empty() {
            return Err(format!("`{url}` names no host"));
        }
        let addr = if hostport.rsplit_once(':').is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
            hostport.to_string()
        } else {
            format!("{hostport}:6379")
        };
        let auth = creds.map(|c| match c.split_once(':') {
            Some(("", pass)) => (None, pass.to_string()),
            Some((user, pass)) => (Some(user.to_string()), pass.to_string()),
            None => (None, c.to_string()),
        });
        let db = if path.is_empty() { 0 } else { path.parse().map_err(|_| format!("`{path}` in `{url}` is not a database number"))? };
        Ok(Target { addr, auth, db })
    }
}

/// One connection.
pub struct Conn {
    stream: BufReader<TcpStream>,
}

impl Conn {
    /// Connects, authenticates and selects the database, all within `timeout`.
    pub async fn open(target: &Target, timeout: Duration) -> Result<Conn, String> {
        tokio::time::timeout(timeout, async {
            let tcp = TcpStream::connect(&target.addr).await.map_err(|e| format!("connect {}: {e}", target.addr))?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut conn = Conn { stream: BufReader::new(tcp) };
            if let Some((user, pass)) = &target.auth {
                let mut args: Vec<&[u8]> = vec![b"AUTH"];
                if let Some(u) = user {
                    args.push(u.as_bytes());
                }
                args.push(pass.as_bytes());
                conn.expect_ok(&args).await?;
            }
            if target.db != 0 {
                let db = target.db.to_string();
                conn.expect_ok(&[b"SELECT", db.as_bytes()]).await?;
            }
            Ok(conn)
        })
        .await
        .map_err(|_| format!("connect {}: timed out after {timeout:?}", target.addr))?
    }

    async fn expect_ok(&mut self, args: &[&[u8]]) -> Result<(), String> {
        match self.call(args).await? {
            Reply::Error(e) => Err(format!("{}: {e}", String::from_utf8_lossy(args[0]))),
            _ => Ok(()),
        }
    }

    /// Sends one command and reads its reply (no timeout here: the caller bounds it).
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).await.map_err(|e| format!("write: {e}"))?;
        read_reply(&mut self.stream).await
    }
}

/// Replies nest (arrays of arrays); bounded so a hostile server cannot exhaust the stack
/// or memory.
const MAX_DEPTH: usize = 4;
const MAX_LEN: usize = 16 << 20;

async fn read_reply(r: &mut BufReader<TcpStream>) -> Result<Reply, String> {
    Box::pin(read_at(r, 0)).await
}

async fn read_at(r: &mut BufReader<TcpStream>, depth: usize) -> Result<Reply, String> {
    let mut line = Vec::with_capacity(32);
    let n = r.read_until(b'\n', &mut line).await.map_err(|e| format!("read: {e}"))?;
    if n == 0 {
        return Err("connection closed by Redis".into());
    }
    if !line.ends_with(b"\r\n") || line.len() < 3 {
        return Err("malformed reply line".into());
    }
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let num = || body.parse::<i64>().map_err(|_| format!("malformed length `{body}`"));
    match line[0] {
        b'+' => Ok(Reply::Status(body)),
        b'-' => Ok(Reply::Error(body)),
        b':' => Ok(Reply::Int(num()?)),
        b'$' => {
            let len = num()?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let len = usize::try_from(len).map_err(|e| e.to_string())?;
            if len > MAX_LEN {
                return Err(format!("bulk reply of {len} bytes"));
            }
            let mut buf = vec![0u8; len + 2];
            r.read_exact(&mut buf).await.map_err(|e| format!("read: {e}"))?;
            buf.truncate(len);
            Ok(Reply::Bulk(Some(buf)))
        }
        b'*' => {
            let len = num()?;
            if len < 0 {
                return Ok(Reply::Array(None));
            }
            if depth >= MAX_DEPTH || len as usize > MAX_LEN / 4 {
                return Err("reply nested too deep or too long".into());
            }
            let mut items = Vec::with_capacity(len as usize);
            for _ in 0..len {
                items.push(Box::pin(read_at(r, depth + 1)).await?);
            }
            Ok(Reply::Array(Some(items)))
        }
        other => Err(format!("unknown reply type `{}`", other as char)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("redis://127.0.0.1:6379/0").unwrap();
        assert_eq!(t, Target { addr: "127.0.0.1:6379".into(), auth: None, db: 0 });
        let t = Target::parse("redis://:s3cret@redis.svc/2").unwrap();
        assert_eq!(t, Target { addr: "redis.svc:6379".into(), auth: Some((None, "s3cret".into())), db: 2 });
        let t = Target::parse("redis://weir:pw@h:7000").unwrap();
        assert_eq!(t.auth, Some((Some("weir".into()), "pw".into())));
        assert!(Target::parse("rediss://h:1").unwrap_err().contains("TLS"));
        assert!(Target::parse("http://h:1").unwrap_err().contains("redis://"));
        assert!(Target::parse("redis://h:1/x").unwrap_err().contains("database"));
        assert!(Target::parse("redis:///0").unwrap_err().contains("no host"));
    }
}
