//! `wasmtime serve` as a peer: the same HTTP component served by wasmtime's own CLI, measured beside wasmloop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long `wasmtime serve` may take to compile the component and listen.
const START_LIMIT: Duration = Duration::from_secs(120);

/// How often a started `wasmtime serve` is tried for a connection: it binds its port
/// itself, so its start is seen only by trying. A cold start's figure is late by up to
/// `FIRST_POLL`; a warm server's start, timed by nobody, is tried less often.
const FIRST_POLL: Duration = Duration::from_millis(1);
const WARM_POLL: Duration = Duration::from_millis(20);

/// A `wasmtime serve` of the bench's own, stopped when dropped.
pub struct WasmtimeServe {
    child: Child,
    pub addr: SocketAddr,
}

impl WasmtimeServe {
    /// `wasmtime serve` of `component` on a free loopback port: with `reuse`, one instance
    /// serves request after request (`--max-instance-reuse-count`); without, each request
    /// gets a new one, its default for WASI 0.2 components. `-S cli` gives it the
    /// interfaces of wasi:cli that some toolchains' HTTP components import beside the
    /// proxy world (wasmloop gives every component all of WASI 0.2).
    pub fn start(wasmtime: &Path, component: &Path, reuse: bool) -> anyhow::Result<Self> {
        Self::launch(wasmtime, component, reuse, &[], WARM_POLL)
    }

    /// The time from starting `wasmtime serve` with `component` and `flags` (its compile
    /// cache's: `-C cache=n`, or `-C cache-config=FILE`) to its first answer to `body`,
    /// which must be a 200 with `expected` where that is known. wasmtime compiles the
    /// component before it listens, so this is its cold start, as a plain HTTP server of
    /// wasmloop's with the action built in has its own.
    pub fn first_answer(
        wasmtime: &Path,
        component: &Path,
        flags: &[String],
        body: &[u8],
        expected: Option<&[u8]>,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let peer = Self::launch(wasmtime, component, false, flags, FIRST_POLL)?;
        let reply = crate::harness::request(peer.addr, "POST", "/", body)?;
        let took = started.elapsed();
        if let Some(wrong) = crate::load::wrong(reply.status, &reply.content(), expected) {
            let (wasmtime, component) = (wasmtime.display(), component.display());
            bail!("{wasmtime} serve {component}: its first answer was {wrong}");
        }
        Ok(took)
    }

    /// `wasmtime serve` of `component` with `flags`, tried every `poll` until it listens.
    fn launch(
        wasmtime: &Path,
        component: &Path,
        reuse: bool,
        flags: &[String],
        poll: Duration,
    ) -> anyhow::Result<Self> {
        let (program, file) = (wasmtime.display(), component.display());
        if !component.is_file() {
            bail!("{file} is missing: build the examples first (component-examples/build.sh)");
        }
        // The port is free when asked; wasmtime serve binds it itself a moment later.
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut command = Command::new(wasmtime);
        command
            .args(["serve", "-S", "cli", "--addr"])
            .arg(addr.to_string());
        if reuse {
            command.args(["--max-instance-reuse-count", "1000000000"]);
        }
        command.args(flags);
        let mut child = command
            .arg(component)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {program} (the wasmtime-serve rows need wasmtime's CLI: \
                     scripts/install-wasmtime.sh installs it from PyPI, or give --wasmtime PATH)"
                )
            })?;
        let started = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = child.try_wait()? {
                bail!("{program} serve {file} exited ({status}) before it listened");
            }
            if started.elapsed() > START_LIMIT {
                let _ = child.kill();
                bail!("{program} serve did not listen within {START_LIMIT:?}");
            }
            std::thread::sleep(poll);
        }
        Ok(WasmtimeServe { child, addr })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for WasmtimeServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A note when `wasmtime` is a script (pyenv's shim, say) rather than wasmtime itself: the
/// script's interpreter starting counts in the peer's cold start (~300 ms for pyenv's,
/// against ~40 ms for wasmtime from its cache on the project's VM).
pub fn script_note(wasmtime: &Path) -> Option<String> {
    let found = if wasmtime.components().count() > 1 {
        Some(wasmtime.to_path_buf())
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(wasmtime))
            .find(|path| path.is_file())
    }?;
    let mut start = [0u8; 2];
    std::io::Read::read_exact(&mut std::fs::File::open(&found).ok()?, &mut start).ok()?;
    (&start == b"#!").then(|| {
        format!(
            "{} is a script, not wasmtime itself (pyenv's shim, say): its interpreter's start \
             counts in the peer's cold start. Give --wasmtime the executable \
             (scripts/install-wasmtime.sh prints its path).",
            found.display()
        )
    })
}
