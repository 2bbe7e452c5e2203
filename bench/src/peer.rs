//! `wasmtime serve` as a peer: the same HTTP component served by wasmtime's own CLI, measured beside wasmloop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long `wasmtime serve` may take to compile the component and listen.
const START_LIMIT: Duration = Duration::from_secs(120);

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
        if !component.is_file() {
            bail!(
                "{} is missing: build the examples first (component-examples/build.sh)",
                component.display()
            );
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
        let mut child = command
            .arg(component)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {} (the wasmtime-serve rows need wasmtime's CLI: \
                     scripts/install-wasmtime.sh installs it from PyPI, or give --wasmtime PATH)",
                    wasmtime.display()
                )
            })?;
        let started = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{} serve {} exited ({status}) before it listened",
                    wasmtime.display(),
                    component.display()
                );
            }
            if started.elapsed() > START_LIMIT {
                let _ = child.kill();
                bail!(
                    "{} serve did not listen within {START_LIMIT:?}",
                    wasmtime.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
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
