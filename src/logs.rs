//! An action's log lines: cut whole from what it writes, attributed to their activation, and written as text or JSON.
//!
//! Every line an action logs passes through here, on every backend, so that a line
//! written in pieces reaches the container's stream whole, never merged with another
//! activation's, and (with `--log-format json`) says which activation wrote it: with
//! overlapping activations, the platform's sentinel-based reading cannot tell.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::lock;

/// How the action's log lines reach the container's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// As the action wrote them, a whole line at a time.
    #[default]
    Text,
    /// One JSON object per line: time, stream, activationId, namespace, action, message.
    Json,
}

impl LogFormat {
    pub fn is_json(self) -> bool {
        self == LogFormat::Json
    }
}

/// Past this many bytes a line goes out in pieces of at most this size, as Docker's
/// json-file driver splits lines: a log store takes lines of a few KiB, and a runaway line
/// (a dump, a file without newlines) must not be held in memory whole. In text the pieces
/// follow each other with no newline between them, so the stream carries the line whole; in
/// JSON each is an object, every one but the last marked `"partial":true`.
pub const LINE_MAX: usize = 16 * 1024;

/// In JSON, how many bytes `push_bounded` renders at a time: at most this many records
/// (one per newline), tens of kilobytes.
const JSON_PUSH: usize = 256;

/// The capacity a buffer of rendered lines keeps between writes.
const RENDERED_KEPT: usize = 128 * 1024;

/// The last line kept for messages about the action (its start, this many bytes): enough
/// to tell a result written on stdout instead of fd 3, or a panic's message.
const LAST_LINE_KEPT: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// Writes `bytes` to the container's stream in one write.
    pub fn write(self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        // Nothing sensible to do when our own stream is gone.
        let _ = match self {
            Stream::Stdout => std::io::stdout().lock().write_all(bytes),
            Stream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    }
}

/// Which activation a line belongs to (`context::Context::labels`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Labels {
    pub activation_id: String,
    pub namespace: String,
    pub action: String,
    /// The W3C trace id of the activation's `traceparent`, if one came.
    pub trace_id: String,
}

/// The current activation of a worker, shared with the streams that carry its logs, and
/// the format they are written in. Lines written between activations keep the last one's
/// labels.
#[derive(Clone)]
pub struct Attribution {
    format: LogFormat,
    labels: Arc<Mutex<Arc<Labels>>>,
}

impl Attribution {
    pub fn new(format: LogFormat) -> Attribution {
        Attribution {
            format,
            labels: Arc::default(),
        }
    }

    pub fn format(&self) -> LogFormat {
        self.format
    }

    pub fn set(&self, labels: Arc<Labels>) {
        *lock(&self.labels) = labels;
    }

    /// Writes a line of the runtime's own about this worker's activation (what it answered,
    /// what it wrote after its answer) on stderr: in JSON, under that activation, so that a
    /// collector files it with the activation's own lines.
    pub fn say(&self, message: &str) {
        runtime_line(self.format, self.get().as_deref(), message);
    }

    /// The labels its activation's lines are rendered with: only in JSON.
    pub fn labels(&self) -> Option<Arc<Labels>> {
        self.get()
    }

    /// The labels a line is rendered with: only in JSON.
    fn get(&self) -> Option<Arc<Labels>> {
        self.format.is_json().then(|| lock(&self.labels).clone())
    }
}

/// One stream of an action's output, cut into lines and rendered for the container.
pub struct Lines {
    stream: Stream,
    attribution: Attribution,
    /// The unfinished line, or what of it is not out yet: at most `LINE_MAX` bytes.
    pending: Vec<u8>,
    /// Pieces of the unfinished line are out already.
    continuing: bool,
    /// The last lines that were not blank (each its start), each ended by a newline: at
    /// most twice `last_words::KEPT` bytes, the last line whole.
    tail: Vec<u8>,
}

impl Lines {
    pub fn new(stream: Stream, attribution: Attribution) -> Lines {
        Lines {
            stream,
            attribution,
            pending: Vec::new(),
            continuing: false,
            tail: Vec::new(),
        }
    }

    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// `push`, writing what it renders to this stream whenever `out` holds `bound` bytes or
    /// more. In JSON each line, an empty one too, becomes a record of a hundred bytes and
    /// more: pushed whole, a burst of short lines (a guest may write a megabyte of them at
    /// once) would be rendered at a hundred times its size before a byte of it went out.
    pub fn push_bounded(&mut self, bytes: &[u8], out: &mut Vec<u8>, bound: usize) {
        // In text a line renders to its own bytes: no more than was pushed.
        let chunk = match self.attribution.format() {
            LogFormat::Json => JSON_PUSH,
            LogFormat::Text => bytes.len().max(1),
        };
        for part in bytes.chunks(chunk) {
            self.push(part, out);
            if out.len() >= bound {
                self.write(out);
            }
        }
    }

    /// Writes lines rendered into `out` to this stream and empties `out`, giving back what a
    /// burst of logs made it grow to.
    pub fn write(&self, out: &mut Vec<u8>) {
        self.stream.write(out);
        out.clear();
        if out.capacity() > RENDERED_KEPT {
            *out = Vec::new();
        }
    }

    /// Takes what the action wrote; renders the lines it completes, and the pieces of a
    /// line that outgrew `LINE_MAX`, into `out`, to be written to the stream.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        let labels = self.attribution.get();
        while !bytes.is_empty() {
            let room = LINE_MAX - self.pending.len();
            // A newline right after `room` bytes still ends a line that fits.
            let window = &bytes[..bytes.len().min(room + 1)];
            if let Some(at) = memchr::memchr(b'\n', window) {
                if self.pending.is_empty() {
                    self.line(&bytes[..at], Piece::Last, labels.as_deref(), out);
                } else {
                    let mut line = std::mem::take(&mut self.pending);
                    line.extend_from_slice(&bytes[..at]);
                    self.line(&line, Piece::Last, labels.as_deref(), out);
                    line.clear();
                    self.pending = line;
                }
                bytes = &bytes[at + 1..];
                continue;
            }
            if bytes.len() <= room {
                self.pending.extend_from_slice(bytes);
                return;
            }
            // Full, and the line goes on: a piece goes out, ending where a character
            // starts, and the rest of that character stays for the next piece.
            self.pending.extend_from_slice(&bytes[..room]);
            bytes = &bytes[room..];
            let end = piece_end(&self.pending, bytes[0]);
            let rest = self.pending.split_off(end);
            let piece = std::mem::replace(&mut self.pending, rest);
            self.line(&piece, Piece::Partial, labels.as_deref(), out);
        }
    }

    /// Renders the unfinished last line, if there is one, as a whole line: the activation
    /// has ended, and its sentinel comes next.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.pending.is_empty() && !self.continuing {
            return;
        }
        let line = std::mem::take(&mut self.pending);
        let labels = self.attribution.get();
        self.line(&line, Piece::Last, labels.as_deref(), out);
    }

    /// The last complete line that was not blank, if any.
    pub fn last_line(&self) -> Option<&[u8]> {
        let kept = self.tail.strip_suffix(b"\n")?;
        let start = memchr::memrchr(b'\n', kept).map_or(0, |at| at + 1);
        Some(&kept[start..])
    }

    /// The words of the crash the last lines report (a panic, an abort, an uncaught
    /// error), if they report one.
    pub fn crash(&self) -> Option<String> {
        crate::last_words::crash(&String::from_utf8_lossy(&self.tail))
    }

    /// Forgets the last lines (a new activation starts).
    pub fn forget_last_line(&mut self) {
        self.tail.clear();
    }

    /// Keeps the start of `line` among the last lines; the oldest go once they pass
    /// `last_words::KEPT` twice over, so that most lines cost no move.
    fn keep(&mut self, line: &[u8]) {
        if self.tail.len() > 2 * crate::last_words::KEPT {
            let cut = self.tail.len() - crate::last_words::KEPT;
            let start =
                memchr::memchr(b'\n', &self.tail[cut..]).map_or(self.tail.len(), |at| cut + at + 1);
            self.tail.drain(..start);
        }
        self.tail
            .extend_from_slice(&line[..floor_char_boundary(line, LAST_LINE_KEPT)]);
        self.tail.push(b'\n');
    }

    /// Renders a line of the runtime's own about this stream's activation (a refused
    /// connection, say) into `out`: in JSON, under that activation's id.
    pub fn note(&self, message: &str, out: &mut Vec<u8>) {
        let labels = self.attribution.get();
        // In text, a line whose pieces are out is ended first: the note is a line of its own.
        if self.continuing && labels.is_none() {
            out.push(b'\n');
        }
        render(message.as_bytes(), self.stream, labels.as_deref(), out);
    }

    /// Whether an unfinished line is held.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Renders a line, or a piece of one, and keeps the start of the line for messages.
    fn line(&mut self, line: &[u8], piece: Piece, labels: Option<&Labels>, out: &mut Vec<u8>) {
        let first = !std::mem::replace(&mut self.continuing, piece == Piece::Partial);
        if first && !line.trim_ascii().is_empty() {
            self.keep(line);
        }
        render_piece(line, piece, self.stream, labels, out);
    }
}

/// Where a full buffer's piece ends, `next` being the byte that follows it: before the
/// character that `next` would continue (a continuation byte is `0b10xxxxxx`), so that no
/// piece splits one; bytes that are no UTF-8 are cut where they are.
fn piece_end(full: &[u8], next: u8) -> usize {
    let continues = |b: u8| b & 0xC0 == 0x80;
    if !continues(next) {
        return full.len();
    }
    match full.iter().rposition(|&b| !continues(b)) {
        // A character is at most 4 bytes: its lead byte and up to 3 more.
        Some(lead) if full.len() - lead <= 3 && lead > 0 => lead,
        _ => full.len(),
    }
}

/// A line as it goes out: whole (or its last piece), or a piece that more of it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Partial,
    Last,
}

/// Renders one line (without its newline) into `out`: as it is, or as JSON with `labels`.
pub fn render(line: &[u8], stream: Stream, labels: Option<&Labels>, out: &mut Vec<u8>) {
    render_piece(line, Piece::Last, stream, labels, out);
}

fn render_piece(
    line: &[u8],
    piece: Piece,
    stream: Stream,
    labels: Option<&Labels>,
    out: &mut Vec<u8>,
) {
    let partial = piece == Piece::Partial;
    let Some(labels) = labels else {
        out.extend_from_slice(line);
        if !partial {
            out.push(b'\n');
        }
        return;
    };
    let entry = Record {
        message: String::from_utf8_lossy(match piece {
            Piece::Last => line.strip_suffix(b"\r").unwrap_or(line),
            Piece::Partial => line,
        }),
        partial,
        ..Record::new(stream, labels)
    };
    serde_json::to_writer(&mut *out, &entry).expect("strings always serialize");
    out.push(b'\n');
}

/// One JSON log record.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Record<'a> {
    time: String,
    stream: &'static str,
    activation_id: &'a str,
    namespace: &'a str,
    action: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    trace_id: &'a str,
    message: std::borrow::Cow<'a, str>,
    /// As Docker marks the pieces of a long line: more of it follows.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    partial: bool,
    /// An activation's figures (`executor::report`), on its last record.
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<&'a serde_json::Value>,
}

impl<'a> Record<'a> {
    fn new(stream: Stream, labels: &'a Labels) -> Record<'a> {
        Record {
            time: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
            stream: stream.name(),
            activation_id: &labels.activation_id,
            namespace: &labels.namespace,
            action: &labels.action,
            trace_id: &labels.trace_id,
            message: std::borrow::Cow::Borrowed(""),
            partial: false,
            report: None,
        }
    }
}

/// Renders an activation's report as a record of its own on stderr, its figures in
/// `report`.
pub fn render_report(
    message: &str,
    labels: &Labels,
    report: &serde_json::Value,
    out: &mut Vec<u8>,
) {
    let entry = Record {
        message: std::borrow::Cow::Borrowed(message),
        report: Some(report),
        ..Record::new(Stream::Stderr, labels)
    };
    serde_json::to_writer(&mut *out, &entry).expect("strings always serialize");
    out.push(b'\n');
}

/// `text` as the W3C `traceparent` an activation carries on, trimmed, if it is one (see
/// `trace_id`).
pub fn traceparent(text: &str) -> Option<&str> {
    trace_id(text).map(|_| text.trim())
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), if it is one:
/// what joins an activation's log records to its trace. One that is malformed, or whose
/// ids are all zeros (invalid, says the spec), gives none.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zeros = |s: &str| s.bytes().all(|b| b == b'0');
    // Version 00 has exactly four parts; a later version may add more, never ff.
    let well_formed = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && !zeros(trace)
        && !zeros(parent);
    well_formed.then_some(trace)
}

/// A line of the runtime's own, on stderr: as it is, or (in JSON) under the activation
/// (or action) it is `about`, and otherwise (nothing known of it) as the runtime's
/// (`"action":"wasmloop"`), so that a collector parsing every line as JSON never meets
/// plain text.
pub fn runtime_line(format: LogFormat, about: Option<&Labels>, message: &str) {
    let mut out = Vec::with_capacity(message.len() + 1);
    let runtime = Labels {
        action: "wasmloop".to_owned(),
        ..Labels::default()
    };
    let about = about.filter(|labels| **labels != Labels::default());
    let labels = format.is_json().then(|| about.unwrap_or(&runtime));
    render(message.as_bytes(), Stream::Stderr, labels, &mut out);
    Stream::Stderr.write(&out);
}

/// The largest index at most `at` that does not split a UTF-8 character of `bytes`.
fn floor_char_boundary(bytes: &[u8], at: usize) -> usize {
    if at >= bytes.len() {
        return bytes.len();
    }
    let mut at = at;
    // Continuation bytes are 0b10xxxxxx.
    while at > 0 && bytes[at] & 0xC0 == 0x80 {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_id_comes_only_from_a_w3c_traceparent() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        assert_eq!(trace_id(&format!("00-{id}-b7ad6b7169203331-01")), Some(id));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
        let labels = Labels {
            activation_id: "a".to_owned(),
            trace_id: trace_id(&format!("00-{id}-b7ad6b7169203331-01"))
                .unwrap()
                .to_owned(),
            ..Labels::default()
        };
        let mut out = Vec::new();
        render(b"hi", Stream::Stdout, Some(&labels), &mut out);
        let record: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(record["traceId"], id);
        // None came: none is invented.
        let mut out = Vec::new();
        render(b"hi", Stream::Stdout, Some(&Labels::default()), &mut out);
        let record: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(record.get("traceId").is_none(), "{record}");
    }

    fn text(lines: &mut Lines, pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        for piece in pieces {
            lines.push(piece, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pieces_come_out_as_whole_lines_and_an_unfinished_one_at_the_end() {
        let mut lines = Lines::new(Stream::Stderr, Attribution::new(LogFormat::Text));
        assert_eq!(text(&mut lines, &[b"a", b"b", b"c\nd"]), "abc\n");
        assert_eq!(text(&mut lines, &[b"e\n\nf"]), "de\n\n");
        assert_eq!(lines.last_line(), Some(&b"de"[..]));
        let mut out = Vec::new();
        lines.finish(&mut out);
        assert_eq!(out, b"f\n");
        assert!(!lines.has_pending());
    }

    #[test]
    fn the_last_lines_keep_a_crash_report_under_its_dump_and_stay_bounded() {
        let mut lines = Lines::new(Stream::Stderr, Attribution::new(LogFormat::Text));
        let dump: String = (0..100)
            .map(|i| format!("\tmain.f{i}() /src/main.go:{i} +0x1f\n"))
            .collect();
        text(
            &mut lines,
            &[
                b"working\npanic: boom\n\ngoroutine 1 [running]:\n",
                dump.as_bytes(),
            ],
        );
        assert_eq!(lines.crash().as_deref(), Some("panic: boom"));
        assert_eq!(
            lines.last_line(),
            Some(&b"\tmain.f99() /src/main.go:99 +0x1f"[..])
        );
        // Logs long after it: the report is gone, and what is kept stays bounded.
        for _ in 0..1000 {
            text(&mut lines, &[b"a line of ordinary logging, forty bytes\n"]);
        }
        assert_eq!(lines.crash(), None);
        assert!(lines.tail.len() <= 2 * crate::last_words::KEPT + LAST_LINE_KEPT + 1);
        assert_eq!(
            lines.last_line(),
            Some(&b"a line of ordinary logging, forty bytes"[..])
        );
        lines.forget_last_line();
        assert_eq!(lines.last_line(), None);
    }

    #[test]
    fn a_line_past_the_cap_goes_out_whole_in_pieces_that_fit() {
        let mut lines = Lines::new(Stream::Stdout, Attribution::new(LogFormat::Text));
        let long = vec![b'x'; 3 * LINE_MAX + 10];
        let mut out = Vec::new();
        // The pieces go out as soon as they are full, not when the line ends.
        lines.push(&long, &mut out);
        assert_eq!(out.len(), 3 * LINE_MAX);
        assert!(lines.has_pending());
        lines.push(b"yyy\nnext\n", &mut out);
        let whole = format!("{}yyy\nnext\n", "x".repeat(3 * LINE_MAX + 10));
        assert_eq!(String::from_utf8(out).unwrap(), whole);
        // A long line that comes whole, newline and all, and one the activation's end finishes.
        let line = [&long[..], b"\n"].concat();
        assert_eq!(text(&mut lines, &[&line]).as_bytes(), &line[..]);
        let mut out = Vec::new();
        lines.push(&long[..2 * LINE_MAX], &mut out);
        lines.finish(&mut out);
        assert_eq!(out, [&long[..2 * LINE_MAX], b"\n"].concat());
        // The start of the line is what messages quote.
        assert_eq!(lines.last_line().map(<[u8]>::len), Some(LAST_LINE_KEPT));
    }

    #[test]
    fn no_piece_splits_a_character() {
        let mut lines = Lines::new(Stream::Stderr, Attribution::new(LogFormat::Text));
        // One byte off the cap, so that a two-byte character straddles it.
        let line = format!("{}{}\n", "x".repeat(LINE_MAX - 1), "é".repeat(LINE_MAX));
        let mut out = Vec::new();
        for chunk in line.as_bytes().chunks(1000) {
            lines.push(chunk, &mut out);
        }
        assert_eq!(out, line.as_bytes());
        // Each piece (what one push lets out) is whole characters on its own.
        let mut lines = Lines::new(Stream::Stderr, Attribution::new(LogFormat::Text));
        let mut pieces = 0;
        for chunk in line.as_bytes().chunks(1000) {
            let mut piece = Vec::new();
            lines.push(chunk, &mut piece);
            if !piece.is_empty() {
                pieces += 1;
                assert!(
                    std::str::from_utf8(&piece).is_ok(),
                    "a piece split a character"
                );
                assert!(piece.len() <= LINE_MAX + 1);
            }
        }
        assert_eq!(pieces, 3);
        assert_eq!(piece_end("aé".as_bytes(), 0xa9), 1);
        assert_eq!(piece_end(b"ab", b'c'), 2);
        assert_eq!(
            piece_end(&[0x80, 0x80], 0x80),
            2,
            "no UTF-8: cut where it is"
        );
    }

    #[test]
    fn json_pieces_are_marked_partial_but_the_last() {
        let attribution = Attribution::new(LogFormat::Json);
        attribution.set(Arc::new(Labels {
            activation_id: "a1".to_owned(),
            ..Labels::default()
        }));
        let labels = attribution.get().unwrap();
        let mut out = Vec::new();
        render_piece(
            b"start",
            Piece::Partial,
            Stream::Stderr,
            Some(&labels),
            &mut out,
        );
        render_piece(b"end", Piece::Last, Stream::Stderr, Some(&labels), &mut out);
        let entries: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&out)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(entries[0]["partial"], true);
        assert_eq!(entries[0]["message"], "start");
        assert_eq!(entries[0]["activationId"], "a1");
        assert!(entries[1].get("partial").is_none());
        assert_eq!(entries[1]["message"], "end");
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let bytes = "é".repeat(LINE_MAX).into_bytes();
        assert_eq!(floor_char_boundary(&bytes, 3) % 2, 0);
        assert!(std::str::from_utf8(&bytes[..floor_char_boundary(&bytes, 3)]).is_ok());
    }

    #[test]
    fn json_lines_carry_the_activation_and_the_stream() {
        let attribution = Attribution::new(LogFormat::Json);
        attribution.set(Arc::new(Labels {
            activation_id: "a1".to_owned(),
            namespace: "ns".to_owned(),
            action: "/ns/hello".to_owned(),
            trace_id: String::new(),
        }));
        let labels = attribution.get().unwrap();
        let mut out = Vec::new();
        render(b"said \"hi\"\r", Stream::Stdout, Some(&labels), &mut out);
        let entry: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(entry["stream"], "stdout");
        assert_eq!(entry["activationId"], "a1");
        assert_eq!(entry["namespace"], "ns");
        assert_eq!(entry["action"], "/ns/hello");
        assert_eq!(entry["message"], "said \"hi\"");
        let time = entry["time"].as_str().unwrap();
        assert!(
            humantime::parse_rfc3339(time).is_ok() && time.len() > 25,
            "{time}"
        );
        assert_eq!(out.last(), Some(&b'\n'));
    }
}
