//! The floor under any server's refusal, below the h2 crate: a server that answers
//! every request with weir's quota refusal from pre-encoded bytes, parsing no more of
//! the request than it must to know where it ends. HTTP/2: frame headers only (no
//! HPACK decoding: the answer does not depend on the request's fields), the stream
//! window closed with `SETTINGS_INITIAL_WINDOW_SIZE 0` as weir closes it while
//! refusing, and per refused stream a HEADERS, a DATA and (if the client has not ended
//! the stream) an RST_STREAM, written together for everything one read brought. HTTP/1.1: find the end of the head, skip the
//! declared body, write the answer. Each connection is a tokio task on a runtime like
//! weir's, and nothing else runs.
//!
//! It is not a server anyone should run: it trusts its client completely (h2load). It
//! measures what the kernel, the runtime and the least possible framing cost per
//! refusal on this machine, so that `scripts/bench-throughput.sh` can tell how much of
//! a refusal's cost any HTTP implementation could save.
//!
//! `cargo run --release --example raw_floor -- 127.0.0.1:4321`

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "common/refusal.rs"]
mod refusal;

use weir::receiver::connection::http2::PREFACE;

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4321".into());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await.unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
        // Made once, for the life of the process.
        let body: &'static [u8] = refusal::quota_refusal_body().leak();
        println!("raw_floor listening on {}", listener.local_addr().expect("bound address"));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream, body));
        }
    });
}

async fn serve(mut io: TcpStream, body: &[u8]) {
    let mut buf = Vec::with_capacity(64 * 1024);
    // Enough to tell the two protocols apart.
    while buf.len() < PREFACE.len() {
        if read_more(&mut io, &mut buf).await.is_none() {
            return;
        }
        if !PREFACE.starts_with(&buf[..buf.len().min(PREFACE.len())]) {
            return http1(io, buf, body).await;
        }
    }
    buf.drain(..PREFACE.len());
    http2(io, buf, body).await;
}

/// Reads what is there into `buf`; `None` at the end or on an error.
async fn read_more(io: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    match io.read_buf(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// Writes everything answered so far in one go, then reads what came next; false when
/// the connection is done.
async fn turn(io: &mut TcpStream, out: &mut Vec<u8>, buf: &mut Vec<u8>) -> bool {
    if !out.is_empty() {
        if io.write_all(out).await.is_err() {
            return false;
        }
        out.clear();
    }
    read_more(io, buf).await.is_some()
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const ACK: u8 = 1;

/// `:status 429`, `content-type application/x-protobuf`, `retry-after 1`,
/// `content-length` of the body: literals without indexing, names from the static table.
fn answer_head(body: &[u8]) -> Vec<u8> {
    let mut h = vec![0x08, 3];
    h.extend_from_slice(b"429");
    h.extend_from_slice(&[0x0f, 31 - 15, 22]);
    h.extend_from_slice(b"application/x-protobuf");
    h.extend_from_slice(&[0x0f, 53 - 15, 1]);
    h.extend_from_slice(b"1");
    let len = body.len().to_string();
    h.extend_from_slice(&[0x0f, 28 - 15, len.len() as u8]);
    h.extend_from_slice(len.as_bytes());
    h
}

async fn http2(mut io: TcpStream, mut buf: Vec<u8>, body: &[u8]) {
    let head = answer_head(body);
    let mut out = Vec::with_capacity(64 * 1024);
    // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no stream may send a body byte.
    frame(&mut out, SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]);
    let mut pos = 0;
    loop {
        while buf.len() - pos >= 9 {
            let len = u32::from_be_bytes([0, buf[pos], buf[pos + 1], buf[pos + 2]]) as usize;
            if buf.len() - pos < 9 + len {
                break;
            }
            let (kind, flags) = (buf[pos + 3], buf[pos + 4]);
            let stream = u32::from_be_bytes([buf[pos + 5], buf[pos + 6], buf[pos + 7], buf[pos + 8]]) & 0x7fff_ffff;
            let payload = &buf[pos + 9..pos + 9 + len];
            match kind {
                HEADERS => {
                    frame(&mut out, HEADERS, 4, stream, &head);
                    frame(&mut out, DATA, END_STREAM, stream, body);
                    if flags & END_STREAM == 0 {
                        frame(&mut out, RST_STREAM, 0, stream, &[0, 0, 0, 0]);
                    }
                }
                SETTINGS if flags & ACK == 0 => frame(&mut out, SETTINGS, ACK, 0, &[]),
                PING if flags & ACK == 0 => frame(&mut out, PING, ACK, 0, payload),
                GOAWAY => return,
                _ => {}
            }
            pos += 9 + len;
        }
        buf.drain(..pos);
        pos = 0;
        if !turn(&mut io, &mut out, &mut buf).await {
            return;
        }
    }
}

async fn http1(mut io: TcpStream, mut buf: Vec<u8>, body: &[u8]) {
    let mut answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/x-protobuf\r\nretry-after: 1\r\ncontent-length: {}\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    let mut out = Vec::new();
    let mut skip = 0usize;
    let trunc = std::env::var_os("FLOOR_TRUNC").is_some();
    loop {
        loop {
            if skip > 0 {
                let n = skip.min(buf.len());
                buf.drain(..n);
                skip -= n;
                if skip > 0 && trunc {
                    // Straight from the socket, never copied out of the kernel.
                    match discard(&io, skip).await {
                        Some(n) => skip -= n,
                        None => return,
                    }
                    continue;
                }
                if skip > 0 {
                    break;
                }
            }
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { break };
            let head = &buf[..end];
            skip = content_length(head);
            buf.drain(..end + 4);
            out.extend_from_slice(&answer);
        }
        if !turn(&mut io, &mut out, &mut buf).await {
            return;
        }
    }
}

/// The `content-length` a request head declares; 0 without one.
fn content_length(head: &[u8]) -> usize {
    let value = |line: &[u8]| {
        let (name, value) = std::str::from_utf8(line).ok()?.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("content-length") {
            return None;
        }
        value.trim().parse().ok()
    };
    head.split(|&b| b == b'\n').find_map(value).unwrap_or(0)
}

/// Throws away up to `n` bytes waiting on the socket without copying them
/// (`recv(MSG_TRUNC)` on TCP); `None` at the end or on an error.
async fn discard(io: &TcpStream, n: usize) -> Option<usize> {
    use std::os::fd::AsRawFd;
    loop {
        io.readable().await.ok()?;
        let got = io.try_io(tokio::io::Interest::READABLE, || {
            // SAFETY: with MSG_TRUNC a TCP socket reads into no buffer.
            let rc = unsafe { libc::recv(io.as_raw_fd(), std::ptr::null_mut(), n, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
            if rc < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(rc as usize)
            }
        });
        match got {
            Ok(0) => return None,
            Ok(k) => return Some(k),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}
