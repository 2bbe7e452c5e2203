//! The servers a run measures (wasmloop's own, the peer, the `exec` row's), and what they hold in memory.

use std::io::{Read, Seek};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::http::StatusCode;
use bytes::Bytes;

use crate::harness::{self, Reply};
use crate::peer::WasmtimeServe;
use crate::report::{Compiler, Form, Lifetime, Protocol};

/// A `wasmloop serve` of our own, on a socket we bind and hand down, stopped when dropped.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    /// The server's logs, read back to say why it died (and for the activations' reports).
    pub logs: std::fs::File,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// A `wasmloop serve` with `args`, without the variables named in `unset`, not yet
    /// initialized.
    pub fn start(args: &[String], unset: &[&str]) -> anyhow::Result<Served> {
        let logs = tempfile::tempfile()?;
        let mut launch = harness::Launch::new(std::env::current_exe()?, 3);
        let command = launch
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logs.try_clone()?);
        for name in unset {
            command.env_remove(name);
        }
        command.args(args);
        let (child, addr) = launch.spawn().context("cannot start wasmloop serve")?;
        Ok(Served { child, addr, logs })
    }

    /// One request to it; a failure says why, if the server died.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Reply> {
        harness::request(self.addr, method, path, body).map_err(|error| self.explain(error.into()))
    }

    /// Why a request failed: the server's exit and its last log lines if it died.
    fn explain(&mut self, error: anyhow::Error) -> anyhow::Error {
        // A refused connection can arrive a moment before the dying server is reapable.
        let mut status = None;
        for _ in 0..20 {
            status = self.child.try_wait().ok().flatten();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let Some(status) = status else {
            return error;
        };
        let mut logs = String::new();
        let _ = self.logs.rewind();
        let _ = self.logs.read_to_string(&mut logs);
        let lines: Vec<&str> = logs.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        anyhow::anyhow!(
            "the wasmloop serve that bench started exited ({status}) before answering /init; \
             its last log lines:\n{tail}"
        )
    }

    /// Initializes the server with `code` (from the file `what`), in how long.
    pub fn init(&mut self, code: &[u8], what: &Path) -> anyhow::Result<Duration> {
        // Made before the clock starts: base64 and JSON of a 25 MB component take the
        // client ~100 ms, which are no part of the server's cold start.
        let body = harness::init_body(code, wasmloop_common::DEFAULT_MAIN);
        let started = Instant::now();
        let answer = self.request("POST", "/init", body.as_bytes())?.text();
        let took = started.elapsed();
        if answer != "{\"ok\":true}\n" {
            bail!("cannot initialize {}: {answer}", what.display());
        }
        Ok(took)
    }

    /// Waits until a plain HTTP server has loaded its action (`file`): its resident set is
    /// read after that, as an /init'ed server's is.
    pub fn ready(&mut self, file: &Path) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let reply = self.request("GET", "/.well-known/wasmloop/ready", b"")?;
            if reply.status == 200 {
                return Ok(());
            }
            if started.elapsed() >= Duration::from_secs(120) {
                let (file, said) = (file.display(), reply.text());
                bail!("the plain HTTP server of {file} never became ready: {said}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The flags of a server of ours for the action in `file`, served as `form`, at
/// `concurrency` (its cache aside).
pub fn server_args(
    form: Form,
    file: &Path,
    compiler: Option<Compiler>,
    lifetime: Lifetime,
    concurrency: u16,
) -> Vec<String> {
    let mut args = vec!["--concurrency".to_owned(), concurrency.to_string()];
    if let Some(compiler) = compiler {
        args.extend(["--wasm-compiler".to_owned(), compiler.to_string()]);
    }
    if lifetime == Lifetime::Fresh {
        args.extend(["--max-activations-per-instance".to_owned(), "1".to_owned()]);
    }
    // Plain HTTP: the action built in, loaded before the server accepts, so the first
    // request waits for it in the backlog.
    if form.protocol == Protocol::Plain {
        let plain = ["--protocol", "http", "--action"].map(str::to_owned);
        args.extend(plain.into_iter().chain([file.display().to_string()]));
    }
    args
}

/// A server of ours with `args` (see `server_args`), without the variables in `unset`,
/// serving the action in `file`: /init'ed, or, served as plain HTTP, loaded.
pub fn ours(file: &Path, form: Form, args: &[String], unset: &[&str]) -> anyhow::Result<Served> {
    const BUILD: &str = "(build the examples first: see the README)";
    if form.protocol == Protocol::Plain {
        anyhow::ensure!(file.is_file(), "{} is missing {BUILD}", file.display());
        let mut served = Served::start(args, unset)?;
        served.ready(file)?;
        return Ok(served);
    }
    let code =
        std::fs::read(file).with_context(|| format!("cannot read {} {BUILD}", file.display()))?;
    let mut served = Served::start(args, unset)?;
    served.init(&code, file)?;
    Ok(served)
}

/// A server a run measures warm.
pub enum Running {
    Ours(Served),
    Peer(WasmtimeServe),
    /// The `exec` row's, in this process.
    Exec(SocketAddr),
}

impl Running {
    pub fn addr(&self) -> SocketAddr {
        match self {
            Running::Ours(served) => served.addr,
            Running::Peer(peer) => peer.addr,
            Running::Exec(addr) => *addr,
        }
    }

    /// Its process, whose CPU and memory are read: none for the `exec` row's, which is
    /// the bench itself.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Running::Ours(served) => Some(served.child.id()),
            Running::Peer(peer) => Some(peer.pid()),
            Running::Exec(_) => None,
        }
    }
}

/// The `exec` row's server: a fresh process per activation, as the old Docker skeleton did.
pub async fn exec(native: PathBuf) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let native = Arc::new(native);
    let app = axum::Router::new().fallback(move |body: Bytes| {
        let native = native.clone();
        async move {
            let value = serde_json::from_slice::<serde_json::Value>(&body)
                .map(|v| v["value"].to_string())
                .unwrap_or_default();
            let output = tokio::process::Command::new(native.as_ref())
                .arg(value)
                .stderr(Stdio::null())
                .output()
                .await;
            match output {
                Ok(output) => (StatusCode::OK, output.stdout),
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string().into_bytes()),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// What `pid` and its descendants hold resident now (Linux; `None` elsewhere).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let own = wasmloop_common::process::resident_bytes(pid)?;
    let children: u64 = child_pids(pid).into_iter().filter_map(resident_bytes).sum();
    Some(own + children)
}

/// What `pid` and its children hold in memory, each page counted once however many
/// mappings share it (the proportional set size, PSS). The resident set counts a page
/// once per mapping: every instance of a component maps its memory image from the same
/// file, and those pages, in memory once, were counted once per instance (the Python
/// hello's +7.2 MiB per extra instance in RSS is +1.4 MiB in PSS, and in the memory
/// cgroup's charge alike). A page shared with another process counts in part, so compare
/// only figures read while the same processes run.
pub fn held_bytes(pid: u32) -> Option<u64> {
    let own = proportional_bytes(pid)?;
    let children: u64 = child_pids(pid).into_iter().filter_map(held_bytes).sum();
    Some(own + children)
}

/// `pid`'s proportional set size.
fn proportional_bytes(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let pss = rollup.lines().find_map(|line| line.strip_prefix("Pss:"))?;
    let kib = pss.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    Some(kib << 10)
}

/// The processes `pid` started.
pub fn child_pids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_mapped_twice_counts_twice_in_the_resident_set_and_once_in_pss() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; 8 << 20]).unwrap();
        let map = |file: &std::fs::File| {
            // SAFETY: a private, read-only mapping of a file this test owns.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    8 << 20,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    std::os::fd::AsRawFd::as_raw_fd(file),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            // Every page read, so mapped.
            // SAFETY: within the mapping just made.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, 8 << 20) };
            assert_eq!(
                bytes.iter().step_by(4096).map(|b| *b as u64).sum::<u64>(),
                7 * 2048
            );
            at
        };
        let me = std::process::id();
        let rss = |pid| wasmloop_common::process::resident_bytes(pid).unwrap();
        let (rss_before, pss_before) = (rss(me), proportional_bytes(me).unwrap());
        let (one, two) = (map(&file), map(&file));
        let (rss_after, pss_after) = (rss(me), proportional_bytes(me).unwrap());
        // SAFETY: the mappings made above, no longer read.
        unsafe {
            libc::munmap(one, 8 << 20);
            libc::munmap(two, 8 << 20);
        }
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        let (rss_grew, pss_grew) = (mib(rss_after - rss_before), mib(pss_after - pss_before));
        assert!(rss_grew > 15.0, "RSS grew {rss_grew} MiB");
        assert!((7.0..12.0).contains(&pss_grew), "PSS grew {pss_grew} MiB");
    }
}
