//! Starting a `wasmloop serve` process and initializing an action in it over HTTP: the one
//! place for it, used by `wasmloop bench` and the integration tests.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use base64::Engine;

/// How long one request may take: a cold `/init` of a large component compiles for
/// seconds, but a server that hangs must not hang its caller.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// `PROGRAM serve --listen-fd FD` on a loopback socket bound here and handed down as `FD`:
/// the server listens before it even starts, so there is no port to race for and no
/// readiness to wait for (requests wait in the backlog until it accepts).
pub struct Launch {
    command: Command,
    listen_fd: i32,
    nofile: Option<u64>,
}

impl Launch {
    pub fn new(program: impl AsRef<OsStr>, listen_fd: i32) -> Launch {
        let mut command = Command::new(program);
        command
            .args(["serve", "--listen-fd"])
            .arg(listen_fd.to_string());
        Launch {
            command,
            listen_fd,
            nofile: None,
        }
    }

    /// The command, for `serve`'s arguments, the environment and stdio.
    pub fn command(&mut self) -> &mut Command {
        &mut self.command
    }

    /// Starts it with this open-file limit (soft and hard), as `docker run --ulimit nofile`.
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Starts the server; the address is where it serves.
    pub fn spawn(mut self) -> std::io::Result<(Child, SocketAddr)> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (fd, target, nofile) = (listener.as_raw_fd(), self.listen_fd, self.nofile);
        // SAFETY: the closure only makes async-signal-safe calls.
        unsafe {
            self.command.pre_exec(move || {
                if let Some(limit) = nofile {
                    let limit = rustix::process::Rlimit {
                        current: Some(limit),
                        maximum: Some(limit),
                    };
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)?;
                }
                install_as(fd, target)
            })
        };
        let child = self.command.spawn()?;
        // Ours no more: were the server to die, connecting would fail instead of waiting
        // in a backlog nobody accepts from.
        drop(listener);
        Ok((child, addr))
    }
}

/// For a `pre_exec` hook: make `fd` the child's descriptor `target`, open across exec.
fn install_as(fd: std::os::fd::RawFd, target: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        if fd == target {
            if libc::fcntl(target, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
        } else if libc::dup2(fd, target) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The `/init` body that installs `code` (sent as base64) with `main`.
pub fn init_body(code: &[u8], main: &str) -> String {
    let code = base64::engine::general_purpose::STANDARD.encode(code);
    serde_json::json!({ "value": { "code": code, "binary": true, "main": main } }).to_string()
}

/// The /init body of `code` with its last base64 symbol made invalid: the server receives
/// and decodes all of it, then refuses it (400), doing nothing else a cold start does.
pub fn spoilt_init_body(code: &[u8], main: &str) -> String {
    let mut code = base64::engine::general_purpose::STANDARD.encode(code);
    code.pop();
    code.push('*');
    serde_json::json!({ "value": { "code": code, "binary": true, "main": main } }).to_string()
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Names in lower case, values trimmed, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body without its chunked framing where it came chunked (a plain HTTP server's
    /// streamed response, `wasmtime serve`'s): what a client library would hand over, to
    /// compare with an expected answer. A chunk cut short ends it.
    pub fn content(&self) -> Vec<u8> {
        let encoding = self.header("transfer-encoding");
        let chunked = encoding.is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
        if !chunked {
            return self.body.clone();
        }
        let mut content = Vec::new();
        let mut rest = self.body.as_slice();
        while let Some(end) = memchr::memmem::find(rest, b"\r\n") {
            let size = std::str::from_utf8(&rest[..end])
                .ok()
                .and_then(|line| line.split(';').next())
                .and_then(|hex| usize::from_str_radix(hex.trim(), 16).ok());
            rest = &rest[end + 2..];
            match size {
                Some(size) if size > 0 && size <= rest.len() => {
                    content.extend_from_slice(&rest[..size]);
                    rest = rest.get(size + 2..).unwrap_or_default();
                }
                _ => break,
            }
        }
        content
    }
}

/// One request on a fresh connection (closed after the answer), over raw HTTP/1.1: what
/// arrives is read as it is, framing and all, with no client library in between.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    // The server may answer (413) and close before reading all of a large body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_reply(&raw).ok_or_else(|| {
        let only = wasmloop_common::excerpt(&raw, 200);
        let said = format!("no HTTP answer to {path}, only: {only:?}");
        std::io::Error::new(std::io::ErrorKind::InvalidData, said)
    })
}

fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let split = memchr::memmem::find(raw, b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect::<Option<_>>()?;
    Some(Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_split_into_status_headers_and_body() {
        let reply =
            parse_reply(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\nX-A: b \r\n\r\n{}\n")
                .unwrap();
        assert_eq!(reply.status, 502);
        assert_eq!(reply.header("content-length"), Some("3"));
        assert_eq!(reply.header("x-a"), Some("b"));
        assert_eq!(reply.body, b"{}\n");
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\n").is_none());
    }

    #[test]
    fn a_chunked_body_reads_without_its_framing_and_another_as_it_came() {
        let reply = parse_reply(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1C\r\n{\"message\":\"Hello, bench0!\"}\r\n\
              2\r\n\n\n\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(reply.content(), b"{\"message\":\"Hello, bench0!\"}\n\n");
        let plain = parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n1C\n").unwrap();
        assert_eq!(plain.content(), b"1C\n");
    }
}
