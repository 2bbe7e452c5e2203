//! A guest's stdio: a refillable stdin, a stdout that hands back whole lines, stderr to ours.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wasmtime_wasi::async_trait;

use crate::executor::lines::{LineBuffer, LineTooLong, is_blank};
use crate::lock;
use crate::logs;
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamResult};

/// Unread input kept for the guest when the next request comes.
const UNREAD_KEPT: usize = 64 * 1024;

/// Lines a guest writes on stdout after the one taken as its answer are kept for the logs
/// up to this much; the rest is counted and dropped.
const STRAY_KEPT: usize = 64 * 1024;

#[derive(Default)]
struct InputState {
    chunks: VecDeque<Bytes>,
    /// The guest, parked until input arrives.
    reader: Option<Waker>,
    /// Set once the guest first waits for input: it has finished starting up.
    has_waited: bool,
    /// The guest has taken everything pushed so far and waits for more.
    waiting: bool,
}

/// The guest's stdin. Unlike a memory pipe it does not report end-of-file when drained:
/// the guest parks until the next request line is pushed.
#[derive(Clone, Default)]
pub struct GuestStdin(Arc<Mutex<InputState>>);

impl GuestStdin {
    pub fn push(&self, line: Bytes) {
        let mut state = lock(&self.0);
        // Input the guest left unread (it answered without reading all of it) would pile up
        // with each activation: past a little, it is dropped.
        if state.chunks.iter().map(Bytes::len).sum::<usize>() > UNREAD_KEPT {
            state.chunks.clear();
        }
        state.chunks.push_back(line);
        state.waiting = false;
        if let Some(waker) = state.reader.take() {
            waker.wake();
        }
    }

    /// Empty, and as if never read: for a guest renewed in place, which starts again.
    pub fn renew(&self) {
        *lock(&self.0) = InputState::default();
    }

    /// Whether the guest has asked for input with none there: it is up and idle.
    pub fn has_waited(&self) -> bool {
        lock(&self.0).has_waited
    }

    /// Whether the guest is waiting for input, having taken all that was pushed.
    pub fn is_waiting(&self) -> bool {
        lock(&self.0).waiting
    }

    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.0);
        if !state.chunks.is_empty() {
            return Poll::Ready(());
        }
        state.reader = Some(cx.waker().clone());
        state.has_waited = true;
        state.waiting = true;
        Poll::Pending
    }

    /// Takes up to `size` bytes, none when nothing is waiting (never end-of-file).
    pub fn take(&self, size: usize) -> Bytes {
        let mut state = lock(&self.0);
        match state.chunks.front_mut() {
            None => Bytes::new(),
            Some(front) if front.len() <= size => state.chunks.pop_front().unwrap_or_default(),
            Some(front) => front.split_to(size),
        }
    }
}

#[async_trait]
impl Pollable for GuestStdin {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await
    }
}

impl InputStream for GuestStdin {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        Ok(self.take(size))
    }
}

impl AsyncRead for GuestStdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.poll_ready(cx).is_pending() {
            return Poll::Pending;
        }
        buf.put_slice(&self.take(buf.remaining()));
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for GuestStdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for GuestStdin {
    fn async_stream(&self) -> Box<dyn AsyncRead + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(self.clone())
    }
}

struct OutputState {
    /// Bytes written and not yet cut into lines: the line being written.
    pending: LineBuffer,
    lines: VecDeque<Bytes>,
    /// Bytes of the lines queued behind the first, which is the next answer.
    behind: usize,
    /// Bytes of stray lines dropped past `STRAY_KEPT`.
    dropped: usize,
    /// A line grew past the cap: the stream is out of step until the instance is replaced.
    overflowed: bool,
    max: usize,
    /// Whose activation the runtime's lines about dropped output are about.
    attribution: logs::Attribution,
}

/// The guest's stdout, which carries its results: complete lines are handed to the host.
#[derive(Clone)]
pub struct GuestStdout(Arc<Mutex<OutputState>>);

impl GuestStdout {
    pub fn new(max_line: usize, attribution: logs::Attribution) -> Self {
        GuestStdout(Arc::new(Mutex::new(OutputState {
            pending: LineBuffer::default(),
            lines: VecDeque::new(),
            behind: 0,
            dropped: 0,
            overflowed: false,
            max: max_line,
            attribution,
        })))
    }

    /// The next complete line (with its `\n`) if there is one, or why there never will be.
    pub fn take_line(&self) -> Option<Result<Bytes, LineTooLong>> {
        let mut state = lock(&self.0);
        if state.overflowed {
            return Some(Err(LineTooLong(state.max)));
        }
        let line = state.lines.pop_front()?;
        let next = state.lines.front().map_or(0, Bytes::len);
        state.behind -= next;
        Some(Ok(line))
    }

    /// Forgets lines (and any partial line) that nobody asked for, and returns them.
    pub fn discard(&self) -> Option<Bytes> {
        let mut state = lock(&self.0);
        let mut dropped = BytesMut::new();
        for line in state.lines.drain(..) {
            dropped.extend_from_slice(&line);
        }
        dropped.extend_from_slice(&state.pending.take_all());
        state.behind = 0;
        if state.dropped > 0 {
            let message = format!(
                "wasmloop: dropped {} more bytes the action wrote on stdout after its result, \
                 unread (one result line per request; write logs on stderr)",
                std::mem::take(&mut state.dropped)
            );
            state.attribution.say(&message);
        }
        (!dropped.is_empty()).then(|| dropped.freeze())
    }

    /// What the guest has written since its last complete line.
    pub fn partial(&self) -> Bytes {
        Bytes::copy_from_slice(lock(&self.0).pending.partial())
    }

    fn append(&self, bytes: &[u8]) {
        let mut state = lock(&self.0);
        let state = &mut *state;
        if state.overflowed {
            return;
        }
        state.pending.extend(bytes);
        loop {
            match state.pending.next_line(state.max) {
                Ok(Some(line)) if is_blank(&line) => {}
                Ok(Some(line)) => {
                    if state.lines.is_empty() {
                        state.lines.push_back(line);
                    } else if state.behind + line.len() <= STRAY_KEPT {
                        state.behind += line.len();
                        state.lines.push_back(line);
                    } else {
                        state.dropped += line.len();
                    }
                }
                Ok(None) => break,
                Err(LineTooLong(_)) => {
                    state.overflowed = true;
                    state.pending = LineBuffer::default();
                    break;
                }
            }
        }
    }
}

/// Where a guest's output stream delivers its bytes. Writes never block the guest: the
/// host side keeps up (lines are queued, stderr is written through).
pub trait Sink: Clone + Send + Sync + 'static {
    fn accept(&self, bytes: &[u8]);
}

impl Sink for GuestStdout {
    fn accept(&self, bytes: &[u8]) {
        self.append(bytes);
    }
}

/// Past this much, the guest's stderr is written out without waiting for the guest to stop.
const STDERR_BATCH: usize = 64 * 1024;

/// The guest's stderr, collected while the guest runs and written to ours whenever it
/// stops, whole lines at a time (an unfinished last line once the activation or the guest
/// ends). A line printed in pieces then reaches the logs whole, not torn by another
/// instance's output, for one system call instead of one per piece.
#[derive(Clone)]
pub struct GuestStderr(Arc<Mutex<Held>>);

struct Held {
    /// The guest's lines, as they complete.
    lines: logs::Lines,
    /// Rendered lines not out yet.
    out: Vec<u8>,
}

impl Default for GuestStderr {
    fn default() -> Self {
        GuestStderr::new(logs::Attribution::new(logs::LogFormat::Text))
    }
}

impl GuestStderr {
    /// The stderr of an instance whose lines are attributed as `attribution` says.
    pub fn new(attribution: logs::Attribution) -> Self {
        GuestStderr::on(logs::Stream::Stderr, attribution)
    }

    /// A log stream of an instance written to the container's `stream`: its stderr, or its
    /// stdout where that is no result channel (an HTTP component's).
    pub fn on(stream: logs::Stream, attribution: logs::Attribution) -> Self {
        GuestStderr(Arc::new(Mutex::new(Held {
            lines: logs::Lines::new(stream, attribution),
            out: Vec::new(),
        })))
    }

    /// Writes out the complete lines, keeping a partial last line for later.
    pub fn flush_lines(&self) {
        write_out(&mut lock(&self.0), false, b"");
    }

    /// The last line the guest logged, written out or not yet, if it logged any: what the
    /// guest said last tells why it ended (a panic's message and place).
    pub fn last_line(&self) -> Option<String> {
        let held = lock(&self.0);
        held.lines
            .last_line()
            .map(|line| String::from_utf8_lossy(line).into_owned())
    }

    /// The words of the crash the guest's last lines report (a panic, an uncaught
    /// exception), if they report one.
    pub fn crash(&self) -> Option<String> {
        lock(&self.0).lines.crash()
    }

    /// A line of the runtime's own about this instance, after the lines the guest finished
    /// (a partial one stays pending, whole).
    pub fn note(&self, line: &str) {
        let held = &mut *lock(&self.0);
        held.lines.note(line, &mut held.out);
        write_out(held, false, b"");
    }

    /// The stderr of an instance renewed in place, as a new one's would be: anything the
    /// guest left unfinished is out, and its last line is forgotten, so that it is never
    /// told as the cause of how the next activation ended.
    pub fn renew(&self) {
        let held = &mut *lock(&self.0);
        write_out(held, true, b"");
        held.lines.forget_last_line();
    }

    /// Writes out everything: the logs must be out before the activation's sentinel.
    pub fn flush(&self) {
        write_out(&mut lock(&self.0), true, b"");
    }

    /// Writes out everything followed by `tail` (the activation's stderr sentinel), in one
    /// write: each costs a few µs on a virtual machine.
    pub fn flush_with(&self, tail: &[u8]) {
        write_out(&mut lock(&self.0), true, tail);
    }
}

/// Writes out the rendered lines (with `all`, the unfinished one too), followed by `tail`
/// (ours, not the guest's), giving back what a burst of logs made the buffer grow to.
fn write_out(held: &mut Held, all: bool, tail: &[u8]) {
    if all {
        held.lines.finish(&mut held.out);
    }
    held.out.extend_from_slice(tail);
    held.lines.write(&mut held.out);
}

impl Sink for GuestStderr {
    fn accept(&self, bytes: &[u8]) {
        let held = &mut *lock(&self.0);
        held.lines.push_bounded(bytes, &mut held.out, STDERR_BATCH);
    }
}

/// A `Sink` as the stream types wasmtime-wasi wants, written once for every sink.
#[derive(Clone)]
pub struct StdioOut<S>(pub S);

#[async_trait]
impl<S: Sink> Pollable for StdioOut<S> {
    async fn ready(&mut self) {}
}

impl<S: Sink> OutputStream for StdioOut<S> {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.0.accept(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1024 * 1024)
    }
}

impl<S: Sink + Unpin> AsyncWrite for StdioOut<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl<S: Sink> IsTerminal for StdioOut<S> {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl<S: Sink + Unpin> StdoutStream for StdioOut<S> {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_hands_back_whole_lines_however_they_are_written() {
        let stdout = GuestStdout::new(100, logs::Attribution::new(logs::LogFormat::Text));
        let mut stream = StdioOut(stdout.clone());
        stream.write(Bytes::from_static(b"{\"a\"")).unwrap();
        stream.write(Bytes::from_static(b":1}\n\n[1]\n{")).unwrap();
        let line = || stdout.take_line().unwrap().unwrap();
        assert_eq!(&line()[..], b"{\"a\":1}\n");
        assert_eq!(&line()[..], b"[1]\n", "blank lines are skipped");
        assert_eq!(stdout.take_line(), None, "half a line is not a line");
        stream.write(Bytes::from_static(b"}\n")).unwrap();
        assert_eq!(&line()[..], b"{}\n");
    }

    #[test]
    fn stdout_refuses_a_line_over_the_cap() {
        let stdout = GuestStdout::new(10, logs::Attribution::new(logs::LogFormat::Text));
        stdout.append(&[b'x'; 11]);
        assert_eq!(stdout.take_line(), Some(Err(LineTooLong(10))));
        let stdout = GuestStdout::new(10, logs::Attribution::new(logs::LogFormat::Text));
        stdout.append(b"0123456789\n");
        assert_eq!(stdout.take_line().unwrap().unwrap().len(), 11);
    }

    #[test]
    fn stray_output_is_discarded() {
        let stdout = GuestStdout::new(100, logs::Attribution::new(logs::LogFormat::Text));
        stdout.append(b"{\"stray\":1}\n{\"half");
        assert_eq!(
            stdout.discard().as_deref(),
            Some(&b"{\"stray\":1}\n{\"half"[..])
        );
        assert_eq!(stdout.discard(), None);
        stdout.append(b"{\"fresh\":1}\n");
        assert_eq!(
            &stdout.take_line().unwrap().unwrap()[..],
            b"{\"fresh\":1}\n"
        );
    }

    #[test]
    fn stray_lines_are_kept_up_to_a_bound_and_the_rest_counted() {
        let stdout = GuestStdout::new(100, logs::Attribution::new(logs::LogFormat::Text));
        stdout.append(b"{\"answer\":1}\n");
        for _ in 0..STRAY_KEPT {
            stdout.append(b"x\n");
        }
        assert_eq!(
            &stdout.take_line().unwrap().unwrap()[..],
            b"{\"answer\":1}\n"
        );
        assert_eq!(lock(&stdout.0).dropped, STRAY_KEPT);
        let stray = stdout.discard().unwrap();
        assert_eq!(stray.len(), STRAY_KEPT);
        assert_eq!(lock(&stdout.0).dropped, 0, "told once");
        // The next answer is whole again.
        stdout.append(b"{\"answer\":2}\n");
        assert_eq!(
            &stdout.take_line().unwrap().unwrap()[..],
            b"{\"answer\":2}\n"
        );
        assert_eq!(stdout.discard(), None);
    }

    #[test]
    fn input_left_unread_does_not_pile_up() {
        let mut input = GuestStdin::default();
        input.push(Bytes::from(vec![b'a'; UNREAD_KEPT + 1]));
        input.push(Bytes::from_static(b"{}\n"));
        assert_eq!(input.read(10).unwrap(), Bytes::from_static(b"{}\n"));
        input.push(Bytes::from_static(b"[1]\n"));
        input.push(Bytes::from_static(b"[2]\n"));
        assert_eq!(
            input.read(10).unwrap(),
            Bytes::from_static(b"[1]\n"),
            "a little is kept"
        );
    }

    #[tokio::test]
    async fn stdin_parks_the_reader_until_a_line_comes_and_reports_the_first_wait() {
        let mut input = GuestStdin::default();
        assert_eq!(
            input.read(10).unwrap(),
            Bytes::new(),
            "empty, not end-of-file"
        );
        let reader = {
            let mut input = input.clone();
            tokio::spawn(async move { input.blocking_read(4).await.unwrap() })
        };
        while !input.has_waited() {
            tokio::task::yield_now().await;
        }
        input.push(Bytes::from_static(b"{}\n!!"));
        assert_eq!(&reader.await.unwrap()[..], b"{}\n!");
        assert_eq!(&input.read(10).unwrap()[..], b"!");
        assert_eq!(input.read(10).unwrap(), Bytes::new());
    }
}
