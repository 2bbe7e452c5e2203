//! A native action's stdout or stderr, read by us and written to ours a whole line at a
//! time (as JSON with `--log-format json`); the last line is kept, to point out a result
//! sent to stdout instead of fd 3.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::unix::AsyncFd;

use crate::executor::AbortOnDrop;
use crate::lock;
use crate::logs::{Attribution, LINE_MAX, Lines, Stream};

pub struct LogTap {
    pipe: AsyncFd<OwnedFd>,
    /// Held while reading and writing, so that two drains never reorder the output.
    tapped: Mutex<Tapped>,
}

struct Tapped {
    lines: Lines,
    /// Rendered lines, reused between drains.
    out: Vec<u8>,
}

impl LogTap {
    /// Takes the read end of the pipe that is the action's `stream`; a task passes on
    /// whatever the action writes, whenever it writes it, until the returned guard is
    /// dropped.
    pub fn start(
        read_end: OwnedFd,
        stream: Stream,
        attribution: Attribution,
    ) -> std::io::Result<(Arc<LogTap>, AbortOnDrop)> {
        set_nonblocking(&read_end)?;
        let tap = Arc::new(LogTap {
            // SAFETY: the AsyncFd owns the descriptor, which stays open until it is dropped.
            pipe: unsafe {
                AsyncFd::register_with_interest(read_end, tokio::io::Interest::READABLE)
            }
            .map_err(|e| e.into_parts().1)?,
            tapped: Mutex::new(Tapped {
                lines: Lines::new(stream, attribution),
                out: Vec::new(),
            }),
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

    /// Passes on the lines completed by what can be read now; false at end of file or on
    /// an error. The activation calls it before its sentinel: an action flushes its
    /// output before writing its result, so its logs are all in the pipe by then. It
    /// reads the descriptor itself: the reactor may not have seen the data yet.
    pub fn drain(&self) -> bool {
        let tapped = &mut *lock(&self.tapped);
        let open = read_into(self.pipe.get_ref(), tapped);
        tapped.write_out();
        open
    }

    /// Passes on everything, an unfinished last line as a line: the activation has ended.
    pub fn finish(&self) {
        let tapped = &mut *lock(&self.tapped);
        read_into(self.pipe.get_ref(), tapped);
        tapped.lines.finish(&mut tapped.out);
        tapped.write_out();
    }

    /// Starts an activation: lines written before it are not its own.
    pub fn forget_lines(&self) {
        lock(&self.tapped).lines.forget_last_line();
    }

    /// The last complete line written since `forget_lines`, after passing on what is
    /// pending.
    pub fn last_line(&self) -> Option<Bytes> {
        self.drain();
        lock(&self.tapped)
            .lines
            .last_line()
            .map(Bytes::copy_from_slice)
    }

    /// The words of the crash the last lines report (a panic, an assertion), after
    /// passing on what is pending.
    pub fn crash(&self) -> Option<String> {
        self.drain();
        lock(&self.tapped).lines.crash()
    }
}

impl Tapped {
    /// Writes the rendered lines to the container's stream.
    fn write_out(&mut self) {
        self.lines.write(&mut self.out);
    }
}

/// Reads what can be read now into `tapped`'s lines; false at end of file or on an error.
/// What they render goes out as soon as it passes `logs::LINE_MAX`, not once the pipe runs
/// dry: an action that writes as fast as this reads never lets it run dry, and held until
/// then its output piled up here (a huge line raised the server's memory by nearly its size).
fn read_into(pipe: &OwnedFd, tapped: &mut Tapped) -> bool {
    // Not zeroed: zeroing it was a measurable cost of every activation (callgrind).
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
    loop {
        match rustix::io::read(pipe, &mut buf) {
            Ok(([], _)) => return false,
            Ok((read, _)) => tapped.lines.push_bounded(read, &mut tapped.out, LINE_MAX),
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, true)?)
}
