//! How one activation's logs end (the sentinels, or nothing), after its report: written before the next activation may start on the same workers.

/// How an activation's logs end, written before the next activation may start on the
/// same workers, so that no log line of the next can come before this one's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The sentinels on stdout and stderr, as the platform reads the logs.
    Sentinels,
    /// Only what the worker held back (`wasmloop run`).
    Logs,
}

/// How one activation's logs end, as its worker writes them: its report (when one is
/// asked for), then the end `End` says.
pub struct Close {
    end: End,
    /// What follows the held-back logs on stderr: the rendered report and the end's.
    tail: std::borrow::Cow<'static, [u8]>,
}

impl Close {
    /// `end`, after `report` (rendered) on stderr.
    pub(super) fn after(end: End, mut report: Vec<u8>) -> Close {
        report.extend_from_slice(end.stderr_tail());
        Close {
            end,
            tail: std::borrow::Cow::Owned(report),
        }
    }

    /// Writes it, where no log lines were held back.
    pub fn write(&self) {
        self.write_stdout();
        if !self.tail.is_empty() {
            crate::protocol::write_stderr(&self.tail);
        }
    }

    /// The stdout half, which comes first.
    pub fn write_stdout(&self) {
        self.end.write_stdout();
    }

    /// What follows the held-back logs on stderr.
    pub fn stderr_tail(&self) -> &[u8] {
        &self.tail
    }
}

impl From<End> for Close {
    fn from(end: End) -> Close {
        Close {
            end,
            tail: std::borrow::Cow::Borrowed(end.stderr_tail()),
        }
    }
}

impl End {
    /// Writes the end, where no log lines were held back.
    pub fn write(self) {
        self.write_stdout();
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            crate::protocol::write_stderr(tail);
        }
    }

    /// The stdout half, which comes first.
    pub fn write_stdout(self) {
        if self == End::Sentinels {
            crate::protocol::write_stdout_sentinel();
        }
    }

    /// What follows the held-back logs on stderr.
    pub fn stderr_tail(self) -> &'static [u8] {
        match self {
            End::Sentinels => crate::protocol::SENTINEL.as_bytes(),
            End::Logs => b"",
        }
    }
}
