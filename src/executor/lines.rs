//! JSON-lines framing shared by the backends: one request line out, one capped result line in.

use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use serde::de::IgnoredAny;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use super::RunError;

/// A line with nothing but whitespace answers nothing: it is skipped, not taken for a
/// result (a writer that sends a line and its `\n` separately can leave one behind).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A result line, read once where it is taken: what the metrics, the report, the
/// response and `wasmloop run`'s exit status all go by.
#[derive(Debug)]
pub struct ResultLine {
    pub line: Bytes,
    /// An object with an `error` field at its top level: OpenWhisk's application error.
    pub error: bool,
    /// The `statusCode` at its top level, if it is one (a web action's response).
    pub status_code: Option<u16>,
}

/// docs/protocol.md 1.7 step 6: a result is one JSON object or array; read in one pass,
/// its bulk skipped unbuilt.
pub fn check_result(line: Bytes) -> Result<ResultLine, RunError> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    let mut deserializer = serde_json::Deserializer::from_slice(&line);
    let read = match first {
        Some(b'{' | b'[') => serde::Deserializer::deserialize_any(&mut deserializer, TopLevel)
            .and_then(|read| deserializer.end().map(|()| read))
            .ok(),
        _ => None,
    };
    match read {
        Some((error, status_code)) => Ok(ResultLine {
            line,
            error,
            status_code,
        }),
        None => match serde_json::from_slice::<IgnoredAny>(&line) {
            Ok(_) => Err(RunError::NotAnObject(line)),
            Err(_) => Err(RunError::NotJson(line)),
        },
    }
}

/// A result's top level: whether it has an `error` field, and its `statusCode`.
struct TopLevel;

impl<'de> serde::de::Visitor<'de> for TopLevel {
    type Value = (bool, Option<u16>);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object or array")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut error, mut status_code) = (false, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "statusCode" => {
                    let value = map.next_value::<serde_json::Value>()?;
                    status_code = value.as_u64().and_then(|code| u16::try_from(code).ok());
                }
                key => {
                    error |= key == "error";
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((error, status_code))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok((false, None))
    }
}

/// Whether `line` is a JSON object or array.
pub fn is_json_result(line: &[u8]) -> bool {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    matches!(first, Some(b'{' | b'[')) && serde_json::from_slice::<IgnoredAny>(line).is_ok()
}

pub use wasmloop_common::excerpt;

/// How long a line of the action's output may be in our own messages.
const EXCERPT: usize = 120;

/// Tells the logs that an action's answer was JSON but not an object or array, and what
/// it was. The HTTP body keeps the fixed message.
pub fn report_not_an_object(say: &dyn Fn(&str), line: &[u8]) {
    let what = match line.trim_ascii_start().first() {
        Some(b'"') => "a JSON string",
        Some(b't' | b'f') => "a JSON boolean",
        Some(b'n') => "JSON null",
        _ => "a JSON number",
    };
    say(&format!(
        "wasmloop: the action's answer is {what}, not an object or array: `{}`. Return a \
         JSON object, such as {{\"result\": ...}}",
        excerpt(line, EXCERPT)
    ));
}

/// How much of a line that is no JSON the default, short explanation quotes.
const SHORT_EXCERPT: usize = 80;

/// Tells the logs that an action's answer was not JSON, and what it was: usually a log
/// line written where only results go. One short line, or with `detailed` (`--hints`) the
/// fix for each language. The HTTP body keeps the fixed message.
pub fn report_not_json(say: &dyn Fn(&str), line: &[u8], detailed: bool) {
    if let Some(rest) = line.strip_prefix("\u{feff}".as_bytes()) {
        say(&format!(
            "wasmloop: the action's answer starts with a byte-order mark (\\ufeff), which JSON \
             does not allow, so it was not taken as its result: `{}`. Write the result \
             without it (an encoder set to UTF-8 with BOM, or a BOM pasted into the source)",
            excerpt(line, EXCERPT)
        ));
        if is_json_result(rest) {
            return;
        }
    }
    if !detailed {
        say(&format!(
            "wasmloop: the action's answer is not JSON: `{}`. Write only results on the result \
             channel (stdout in WebAssembly, fd 3 in a native action) and logs on stderr \
             (--hints says how in each language)",
            excerpt(line, SHORT_EXCERPT)
        ));
        return;
    }
    say(&format!(
        "wasmloop: the action's answer is not JSON, so it was not taken as its result: `{}`. \
         Only result lines go on the result channel (stdout in a WebAssembly action, fd 3 in \
         a native one): write logs on stderr. In a WebAssembly module a plain print lands \
         there too: log with eprintln! in Rust, fprintf(stderr, ...) in C (the Go, Python \
         and JavaScript SDKs send prints to the logs themselves).",
        excerpt(line, EXCERPT)
    ));
}

/// Tells the logs what an action wrote on its result channel after its answer (dropped,
/// so that it cannot pass for the next activation's answer).
pub fn report_stray(say: &dyn Fn(&str), output: &[u8]) {
    let mut lines = output
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| !is_blank(l));
    for line in lines.by_ref().take(STRAY_LINES_TOLD) {
        say(&format!(
            "wasmloop: dropped output the action wrote after its result: `{}` \
             (one result line per request; write logs on stderr)",
            excerpt(line, EXCERPT)
        ));
    }
    // A flood of them would flood the logs too: the rest are counted.
    let (more, bytes) = lines.fold((0, 0), |(n, b), l| (n + 1, b + l.len()));
    if more > 0 {
        say(&format!(
            "wasmloop: dropped {more} more lines ({bytes} bytes) the action wrote after its \
             result"
        ));
    }
}

/// Stray lines told one by one in the logs; the rest are counted.
const STRAY_LINES_TOLD: usize = 10;

/// What an action did instead of answering: it took its whole request and went back to
/// waiting for input, which only the next request would bring. Waiting longer cannot help.
#[derive(Debug)]
pub struct NoAnswer {
    /// Where results go: "fd 3" or "stdout".
    pub channel: &'static str,
    /// What arrived there without a newline.
    pub partial: Bytes,
    /// The last line it wrote on its stdout during the activation, when that is not the
    /// result channel and the line is a JSON object or array: a result on the wrong fd.
    pub stdout_line: Option<Bytes>,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channel = self.channel;
        if !self.partial.is_empty() {
            return write!(
                f,
                "the action wrote {} bytes on {channel} without a newline (`{}`) and is waiting \
                 for its next input: end each result with a newline, and flush it",
                self.partial.len(),
                excerpt(&self.partial, EXCERPT)
            );
        }
        if let Some(line) = self.stdout_line.as_deref().filter(|l| is_json_result(l)) {
            return write!(
                f,
                "no result arrived on {channel}, and the action is waiting for its next input; \
                 it wrote this JSON line on stdout: `{}`. A native action writes its result on \
                 fd 3 (stdout is for logs)",
                excerpt(line, EXCERPT)
            );
        }
        write!(
            f,
            "no result arrived on {channel}: the action read its request and is waiting for more \
             input without having answered. Answer each request line as it arrives (do not read \
             stdin to its end), and flush the result line (C stdio and buffered writers hold it \
             back until flushed)"
        )
    }
}

/// The request as one line: every `\n` removed (raw newlines can only be JSON whitespace),
/// one `\n` appended. The JSON itself is not re-encoded.
pub fn frame_request(body: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(body.len() + 1);
    let mut from = 0;
    for at in memchr::memchr_iter(b'\n', body) {
        line.extend_from_slice(&body[from..at]);
        from = at + 1;
    }
    line.extend_from_slice(&body[from..]);
    line.push(b'\n');
    line
}

#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The stream ended before a full line.
    #[error("end of stream")]
    Eof,
    /// No newline within the cap; the stream is no longer in step.
    #[error("line longer than {0} bytes")]
    TooLong(usize),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<LineTooLong> for LineError {
    fn from(LineTooLong(max): LineTooLong) -> Self {
        LineError::TooLong(max)
    }
}

/// Why a line was not taken: no newline within the cap; the stream is out of step.
#[derive(Debug, PartialEq, Eq)]
pub struct LineTooLong(pub usize);

/// Bytes cut into `\n`-terminated lines as they arrive, each byte scanned once however they
/// come: the one line splitter, for results read from a pipe (`LineReader`) and results
/// written by a guest.
#[derive(Default)]
pub struct LineBuffer {
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
}

impl LineBuffer {
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The buffer itself, to read into: bytes appended there are split like `extend`'s.
    fn unfilled(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The next complete line with its `\n` (blank ones too), if one has arrived; at most
    /// `max` bytes before the newline, or the stream is out of step.
    pub fn next_line(&mut self, max: usize) -> Result<Option<Bytes>, LineTooLong> {
        match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            Some(pos) => {
                let end = self.scanned + pos + 1;
                self.scanned = 0;
                if end - 1 > max {
                    return Err(LineTooLong(max));
                }
                Ok(Some(self.buf.split_to(end).freeze()))
            }
            None => {
                self.scanned = self.buf.len();
                if self.scanned > max {
                    return Err(LineTooLong(max));
                }
                Ok(None)
            }
        }
    }

    /// What has arrived since the last complete line.
    pub fn partial(&self) -> &[u8] {
        &self.buf
    }

    /// Everything buffered, complete lines and partial line alike; the buffer is empty
    /// after.
    pub fn take_all(&mut self) -> BytesMut {
        self.scanned = 0;
        self.buf.split()
    }
}

/// Reads `\n`-terminated lines from a stream. Cancel-safe: bytes read before a cancelled
/// call stay buffered for the next one.
pub struct LineReader<R> {
    inner: R,
    lines: LineBuffer,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            lines: LineBuffer {
                buf: BytesMut::with_capacity(8 * 1024),
                ..LineBuffer::default()
            },
        }
    }

    /// Drops whatever is buffered or can be read without waiting, and returns its start
    /// (at most 64 KiB), if there was any.
    pub fn discard_pending(&mut self) -> Option<Bytes> {
        const KEEP: usize = 64 * 1024;
        // Nothing is allocated unless there is something to drop: this runs before every
        // activation, and the buffer keeps its capacity for the next lines.
        let mut dropped = Vec::new();
        let keep = |dropped: &mut Vec<u8>, bytes: &[u8]| {
            let room = KEEP.saturating_sub(dropped.len());
            dropped.extend_from_slice(&bytes[..bytes.len().min(room)]);
        };
        keep(&mut dropped, &self.lines.take_all());
        // Not zeroed: this runs before every activation, where zeroing showed in callgrind.
        let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            let mut read = ReadBuf::uninit(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(&mut cx, &mut read) {
                Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                    keep(&mut dropped, read.filled())
                }
                _ => break,
            }
        }
        (!dropped.is_empty()).then(|| Bytes::from(dropped))
    }

    /// What has arrived since the last line: the start of a line without its newline.
    pub fn pending(&self) -> Bytes {
        Bytes::copy_from_slice(self.lines.partial())
    }

    /// The next line, including its `\n`, at most `max` bytes before the newline.
    pub async fn read_line(&mut self, max: usize) -> Result<Bytes, LineError> {
        loop {
            if let Some(line) = self.buffered_line(max)? {
                return Ok(line);
            }
            let buf = self.lines.unfilled();
            buf.reserve(64 * 1024);
            if self.inner.read_buf(buf).await? == 0 {
                return Err(LineError::Eof);
            }
        }
    }
}

impl<R> LineReader<R> {
    /// A complete, non-blank line already in the buffer.
    fn buffered_line(&mut self, max: usize) -> Result<Option<Bytes>, LineError> {
        while let Some(line) = self.lines.next_line(max)? {
            if !is_blank(&line) {
                return Ok(Some(line));
            }
        }
        Ok(None)
    }
}

impl<R: AsFd> LineReader<R> {
    /// A line if one is buffered or already in the descriptor, without waiting. The read
    /// goes straight to the (non-blocking) descriptor: the reactor's idea of readiness
    /// lags until its next poll. End of file is left for `read_line` to report.
    pub fn try_read_line_now(&mut self, max: usize) -> Result<Option<Bytes>, LineError> {
        loop {
            if let Some(line) = self.buffered_line(max)? {
                return Ok(Some(line));
            }
            let buf = self.lines.unfilled();
            buf.reserve(64 * 1024);
            let spare = buf.spare_capacity_mut();
            match rustix::io::read(&self.inner, spare) {
                Ok(([], _)) => return Ok(None),
                Ok((read, _)) => {
                    let n = read.len();
                    // SAFETY: read(2) initialized the first `n` spare bytes; BytesMut has
                    // no safe way to read into its spare capacity.
                    unsafe { buf.set_len(buf.len() + n) };
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => return Ok(None),
                Err(error) => return Err(std::io::Error::from(error).into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn a_line_past_the_cap_is_an_error_whether_or_not_its_newline_came() {
        let mut lines = LineBuffer::default();
        lines.extend(b"12345\n");
        assert_eq!(lines.next_line(4), Err(LineTooLong(4)));
        let mut lines = LineBuffer::default();
        lines.extend(b"1234\n123");
        assert_eq!(lines.next_line(4).unwrap().as_deref(), Some(&b"1234\n"[..]));
        lines.extend(b"45");
        assert_eq!(lines.next_line(4), Err(LineTooLong(4)));
    }

    #[test]
    fn requests_lose_their_newlines_and_gain_one() {
        assert_eq!(frame_request(b"{\n \"a\": 1\n}\n"), b"{ \"a\": 1}\n");
        assert_eq!(frame_request(b"{}"), b"{}\n");
        assert_eq!(frame_request(b""), b"\n");
    }

    #[tokio::test]
    async fn lines_split_across_writes_come_back_whole() {
        let (mut tx, rx) = tokio::io::duplex(16);
        let writer = tokio::spawn(async move {
            tx.write_all(b"{\"a\":").await.unwrap();
            tx.write_all(b"1}\n[2]\n{\"long\":\"").await.unwrap();
            tx.write_all("x".repeat(100).as_bytes()).await.unwrap();
            tx.write_all(b"\"}\ntrailing").await.unwrap();
        });
        let mut reader = LineReader::new(rx);
        assert_eq!(&reader.read_line(1000).await.unwrap()[..], b"{\"a\":1}\n");
        assert_eq!(&reader.read_line(1000).await.unwrap()[..], b"[2]\n");
        let long = reader.read_line(1000).await.unwrap();
        assert_eq!(long.len(), 100 + 12);
        writer.await.unwrap();
        assert!(matches!(reader.read_line(1000).await, Err(LineError::Eof)));
    }

    #[tokio::test]
    async fn blank_lines_are_skipped() {
        let (mut tx, rx) = tokio::io::duplex(64);
        tx.write_all(b"\n \r\n{}\n").await.unwrap();
        let mut reader = LineReader::new(rx);
        assert_eq!(&reader.read_line(10).await.unwrap()[..], b"{}\n");
    }

    #[tokio::test]
    async fn a_line_over_the_cap_is_refused() {
        let (mut tx, rx) = tokio::io::duplex(1024);
        tx.write_all(&[b'x'; 300]).await.unwrap();
        let mut reader = LineReader::new(rx);
        assert!(matches!(
            reader.read_line(100).await,
            Err(LineError::TooLong(100))
        ));

        let (mut tx, rx) = tokio::io::duplex(1024);
        tx.write_all(b"0123456789\n").await.unwrap();
        let mut reader = LineReader::new(rx);
        assert!(matches!(
            reader.read_line(9).await,
            Err(LineError::TooLong(9))
        ));
    }

    #[test]
    fn an_application_error_is_an_error_field_at_the_top_of_an_object_whatever_it_holds() {
        let read = |line: &'static [u8]| check_result(Bytes::from_static(line)).unwrap();
        for yes in [
            &b"{\"error\":\"no\"}"[..],
            b" {\"a\":1,\"error\":null}\n",
            b"{\"error\":{}}",
        ] {
            assert!(read(yes).error, "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"{\"errors\":1}"[..],
            b"[{\"error\":1}]",
            b"{\"a\":{\"error\":1}}",
            br#"{"text":"\"error\""}"#,
        ] {
            assert!(!read(no).error, "{}", String::from_utf8_lossy(no));
        }
        assert_eq!(
            read(br#"{"statusCode":503,"body":"x"}"#).status_code,
            Some(503)
        );
        for none in [
            &br#"{"statusCode":"503"}"#[..],
            br#"{"statusCode":70000}"#,
            br#"{"a":{"statusCode":404}}"#,
            br#"[{"statusCode":404}]"#,
        ] {
            assert_eq!(
                read(none).status_code,
                None,
                "{}",
                String::from_utf8_lossy(none)
            );
        }
    }

    #[test]
    fn results_must_be_json_objects_or_arrays() {
        assert!(check_result(Bytes::from_static(b"{\"a\":1}\n")).is_ok());
        assert!(check_result(Bytes::from_static(b" [1]\n")).is_ok());
        assert!(matches!(
            check_result(Bytes::from_static(b"null\n")),
            Err(RunError::NotAnObject(_))
        ));
        assert!(matches!(
            check_result(Bytes::from_static(b"\"s\"\n")),
            Err(RunError::NotAnObject(_))
        ));
        assert!(matches!(
            check_result(Bytes::from_static(b"oops\n")),
            Err(RunError::NotJson(line)) if &line[..] == b"oops\n"
        ));
        assert!(matches!(
            check_result(Bytes::from_static(b"{} {}\n")),
            Err(RunError::NotJson(_))
        ));
    }

    #[tokio::test]
    async fn a_line_already_in_the_pipe_is_read_without_waiting() {
        let (mut tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        let mut reader = LineReader::new(rx);
        assert!(matches!(reader.try_read_line_now(100), Ok(None)));
        tx.write_all(b"{\"a\":1}\n[2]").await.unwrap();
        assert_eq!(
            &reader.try_read_line_now(100).unwrap().unwrap()[..],
            b"{\"a\":1}\n"
        );
        assert!(matches!(reader.try_read_line_now(100), Ok(None)));
        tx.write_all(b"\n").await.unwrap();
        assert_eq!(
            &reader.try_read_line_now(100).unwrap().unwrap()[..],
            b"[2]\n"
        );
        drop(tx);
        assert!(matches!(reader.try_read_line_now(100), Ok(None)));
        assert!(matches!(reader.read_line(100).await, Err(LineError::Eof)));
    }

    #[tokio::test]
    async fn pending_input_is_discarded_without_waiting() {
        let (mut tx, rx) = tokio::io::duplex(1024);
        tx.write_all(b"{\"stray\":1}\n{\"stray\":").await.unwrap();
        let mut reader = LineReader::new(rx);
        assert_eq!(
            reader.discard_pending().as_deref(),
            Some(&b"{\"stray\":1}\n{\"stray\":"[..])
        );
        assert_eq!(reader.discard_pending(), None);
        tx.write_all(b"{\"fresh\":1}\n").await.unwrap();
        assert_eq!(
            &reader.read_line(100).await.unwrap()[..],
            b"{\"fresh\":1}\n"
        );
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_cap_is_accepted() {
        let (mut tx, rx) = tokio::io::duplex(1024);
        tx.write_all(b"0123456789\n").await.unwrap();
        let mut reader = LineReader::new(rx);
        assert_eq!(reader.read_line(10).await.unwrap().len(), 11);
    }
}
