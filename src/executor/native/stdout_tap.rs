//! A native action's stdout, read by us and copied to ours: its logs pass through as
//! before, and the last line it wrote is kept, to point out a result sent to stdout
//! instead of fd 3.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::unix::AsyncFd;

use crate::executor::AbortOnDrop;
use crate::executor::lines::{LineBuffer, is_blank};
use crate::lock;

/// Keep this much of a line: enough to show one, and a flood costs nothing more.
const KEEP: usize = 4096;

pub struct StdoutTap {
    pipe: AsyncFd<OwnedFd>,
    /// Held while reading and writing, so that two drains never reorder the output.
    lines: Mutex<Lines>,
}

struct Lines {
    /// What was written, cut into lines of at most `KEEP` bytes.
    pending: LineBuffer,
    /// The last complete line since `forget_lines`.
    last: Option<Bytes>,
}

impl Default for Lines {
    fn default() -> Self {
        Lines {
            pending: LineBuffer::cutting(KEEP),
            last: None,
        }
    }
}

impl StdoutTap {
    /// Takes the read end of the pipe that is the action's stdout; a task copies whatever
    /// the action writes, whenever it writes it, until the returned guard is dropped.
    pub fn start(read_end: OwnedFd) -> std::io::Result<(Arc<StdoutTap>, AbortOnDrop)> {
        set_nonblocking(&read_end)?;
        let tap = Arc::new(StdoutTap {
            // SAFETY: the AsyncFd owns the descriptor, which stays open until it is dropped.
            pipe: unsafe {
                AsyncFd::register_with_interest(read_end, tokio::io::Interest::READABLE)
            }
            .map_err(|e| e.into_parts().1)?,
            lines: Mutex::new(Lines::default()),
        });
        let pump = tokio::spawn({
            let tap = tap.clone();
            async move {
                while let Ok(mut ready) = tap.pipe.readable().await {
                    if !tap.drain() {
                        break;
                    }
                    ready.clear_ready();
                }
            }
        });
        Ok((tap, AbortOnDrop(pump.abort_handle())))
    }

    /// Copies what can be read now to our stdout; false at end of file or on an error.
    /// The activation calls it before its sentinel: an action flushes its stdout before
    /// writing its result, so its logs are all in the pipe by then. It reads the
    /// descriptor itself: the reactor may not have seen the data yet.
    pub fn drain(&self) -> bool {
        let mut lines = lock(&self.lines);
        // Not zeroed: that was 16,000 instructions of every activation (callgrind).
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
        loop {
            match rustix::io::read(self.pipe.get_ref(), &mut buf) {
                Ok(([], _)) => return false,
                Ok((read, _)) => {
                    // Nothing sensible to do when our own stdout is gone.
                    let _ = std::io::stdout().lock().write_all(read);
                    lines.note(read);
                }
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return false,
            }
        }
    }

    /// Starts an activation: lines written before it are not its own.
    pub fn forget_lines(&self) {
        lock(&self.lines).last = None;
    }

    /// The last complete line written since `forget_lines`, after copying what is pending.
    pub fn last_line(&self) -> Option<Bytes> {
        self.drain();
        lock(&self.lines).last.clone()
    }
}

impl Lines {
    fn note(&mut self, bytes: &[u8]) {
        self.pending.extend(bytes);
        // A cutting buffer's lines always fit.
        while let Ok(Some(line)) = self.pending.next_line(usize::MAX) {
            if !is_blank(&line) {
                self.last = Some(line.slice(..line.len() - 1));
            }
        }
    }
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, true)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_complete_line_is_kept_and_long_ones_are_cut() {
        let mut lines = Lines::default();
        lines.note(b"log one\n{\"count\"");
        assert_eq!(lines.last.as_deref(), Some(&b"log one"[..]));
        lines.note(b":1}\n\n");
        assert_eq!(lines.last.as_deref(), Some(&b"{\"count\":1}"[..]));
        lines.note(&vec![b'x'; 3 * KEEP]);
        lines.note(b"\n");
        assert_eq!(lines.last.as_ref().map(|l| l.len()), Some(KEEP));
    }
}
