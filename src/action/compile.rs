//! The `OW_COMPILER` hook: turns uploaded sources into `bin/exec`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

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
            .kill_on_drop(true);
        if let Some(path) = self.path {
            command.env("PATH", path);
        }
        let output = tokio::time::timeout(self.timeout, command.output())
            .await
            .map_err(|_| PrepareError::Compile(crate::config::compile_timed_out(self.timeout)))?
            .map_err(|e| {
                PrepareError::Compile(format!(
                    "cannot run the compiler {}: {e}",
                    self.program.display()
                ))
            })?;
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
