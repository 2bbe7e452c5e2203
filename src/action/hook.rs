//! The `OW_COMPILER` hook: turns uploaded sources into `bin/exec`.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::PrepareError;
use crate::protocol::MSG_CANNOT_COMPILE;

pub struct Compiler<'a> {
    pub program: &'a Path,
    /// The child environment of docs/protocol.md 1.5, to which `PATH` is added.
    pub env: &'a [(String, String)],
    pub path: Option<&'a str>,
    pub timeout: Duration,
}

impl Compiler<'_> {
    /// Runs `<compiler> <main> <srcdir> <bindir>`. Any output means failure, as in the
    /// reference: compilers print only when something went wrong.
    pub async fn compile(&self, main: &str, src: &Path, bin: &Path) -> Result<(), PrepareError> {
        let mut command = tokio::process::Command::new(self.program);
        command
            .arg(main)
            .arg(src)
            .arg(bin)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own: whatever it starts ends with it.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(path) = self.path {
            command.env("PATH", path);
        }
        let cannot_run = |e: std::io::Error| {
            PrepareError::Compile(format!(
                "cannot run the compiler {}: {e}",
                self.program.display()
            ))
        };
        let mut child = command.spawn().map_err(cannot_run)?;
        // Killed however this ends: done, timed out, or the /init dropped.
        let group = child.id().map(|pid| KillGroup(pid as libc::pid_t));
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let finished = async {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (status, read_out, read_err) = tokio::join!(
                async {
                    let status = child.wait().await;
                    // A daemon it left behind would hold our pipes open until the timeout.
                    if let Some(group) = &group {
                        group.kill();
                    }
                    status
                },
                read_all(stdout.as_mut(), &mut out),
                read_all(stderr.as_mut(), &mut err),
            );
            read_out.and(read_err)?;
            Ok::<_, std::io::Error>(Output {
                status: status?,
                stdout: out,
                stderr: err,
            })
        };
        let output = tokio::time::timeout(self.timeout, finished)
            .await
            .map_err(|_| PrepareError::CompileTimedOut(self.timeout))?
            .map_err(cannot_run)?;
        let mut text = output.stdout;
        text.extend_from_slice(&output.stderr);
        if !text.is_empty() {
            return Err(PrepareError::Compile(
                String::from_utf8_lossy(&text).into_owned(),
            ));
        }
        if !output.status.success() || !bin.join("exec").exists() {
            return Err(PrepareError::Compile(MSG_CANNOT_COMPILE.to_owned()));
        }
        Ok(())
    }
}

async fn read_all(
    pipe: Option<&mut (impl tokio::io::AsyncRead + Unpin)>,
    into: &mut Vec<u8>,
) -> std::io::Result<()> {
    match pipe {
        Some(pipe) => pipe.read_to_end(into).await.map(drop),
        None => Ok(()),
    }
}

/// The compiler's process group, killed when this is dropped.
struct KillGroup(libc::pid_t);

impl KillGroup {
    fn kill(&self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
