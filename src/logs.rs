//! An action's log lines: cut whole from what it writes, attributed to their activation, and written as text or JSON.
//!
//! Every line an action logs passes through here, on every backend, so that a line
//! written in pieces reaches the container's stream whole, never merged with another
//! activation's, and (with `--log-format json`) says which activation wrote it: with
//! overlapping activations, the platform's sentinel-based reading cannot tell.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
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

/// The format, for the whole process: the container has one stdout and one stderr, and
/// every writer to them (the backends, the runtime's own lines) must agree.
static FORMAT: AtomicU8 = AtomicU8::new(0);

pub fn set_format(format: LogFormat) {
    FORMAT.store(format as u8, Ordering::Relaxed);
}

/// Whether lines go out as JSON.
pub fn json() -> bool {
    FORMAT.load(Ordering::Relaxed) == LogFormat::Json as u8
}

/// Past this many bytes a line is cut: the rest of it, up to its newline, is dropped, and
/// a marker says so. A log store takes lines of a few KiB; a runaway line (a binary dump,
/// a file without newlines) would otherwise be held in memory whole.
pub const LINE_MAX: usize = 16 * 1024;

/// What ends a line that was cut.
const CUT_MARKER: &str = " [wasmloop: the line went on past 16 KiB and was cut]";

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

/// Which activation a line belongs to: read from its request line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Labels {
    pub activation_id: String,
    pub namespace: String,
    pub action: String,
}

impl Labels {
    /// The labels of the activation whose request is `line` (empty where it has none).
    pub fn of(line: &[u8]) -> Labels {
        #[derive(serde::Deserialize)]
        struct Request<'a> {
            #[serde(default, borrow)]
            activation_id: std::borrow::Cow<'a, str>,
            #[serde(default, borrow)]
            namespace: std::borrow::Cow<'a, str>,
            #[serde(default, borrow)]
            action_name: std::borrow::Cow<'a, str>,
        }
        match serde_json::from_slice::<Request>(line) {
            Ok(request) => Labels {
                activation_id: request.activation_id.into_owned(),
                namespace: request.namespace.into_owned(),
                action: request.action_name.into_owned(),
            },
            Err(_) => Labels::default(),
        }
    }
}

/// The current activation of a worker, shared with the streams that carry its logs. Lines
/// written between activations keep the last one's labels.
#[derive(Clone, Default)]
pub struct Attribution(Arc<Mutex<Arc<Labels>>>);

impl Attribution {
    pub fn set(&self, labels: Labels) {
        *lock(&self.0) = Arc::new(labels);
    }

    fn get(&self) -> Arc<Labels> {
        lock(&self.0).clone()
    }
}

/// One stream of an action's output, cut into lines and rendered for the container.
pub struct Lines {
    stream: Stream,
    attribution: Attribution,
    /// The unfinished line.
    pending: Vec<u8>,
    /// In a line that was cut: its rest, up to its newline, is dropped.
    cutting: bool,
    /// The last complete line that was not blank (its start).
    last: Vec<u8>,
}

impl Lines {
    pub fn new(stream: Stream, attribution: Attribution) -> Lines {
        Lines {
            stream,
            attribution,
            pending: Vec::new(),
            cutting: false,
            last: Vec::new(),
        }
    }

    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Takes what the action wrote; renders the lines it completes (and the start of a
    /// line that outgrew `LINE_MAX`) into `out`, to be written to the stream.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        let json = json();
        let labels = if json {
            Some(self.attribution.get())
        } else {
            None
        };
        while let Some(end) = memchr::memchr(b'\n', bytes) {
            let (piece, rest) = (&bytes[..end], &bytes[end + 1..]);
            bytes = rest;
            if std::mem::take(&mut self.cutting) {
                continue;
            }
            if self.pending.is_empty() {
                self.line(piece, labels.as_deref(), out);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(piece);
                self.line(&line, labels.as_deref(), out);
                line.clear();
                self.pending = line;
            }
        }
        if self.cutting || bytes.is_empty() {
            return;
        }
        self.pending.extend_from_slice(bytes);
        // Held no longer than the cap allows: the line goes out cut, its rest is dropped.
        if self.pending.len() > LINE_MAX {
            let line = std::mem::take(&mut self.pending);
            self.line(&line, labels.as_deref(), out);
            self.cutting = true;
        }
    }

    /// Renders the unfinished last line, if there is one, as a whole line: the activation
    /// has ended, and its sentinel comes next.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.cutting = false;
        if self.pending.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.pending);
        let labels = json().then(|| self.attribution.get());
        self.line(&line, labels.as_deref(), out);
    }

    /// The last complete line that was not blank, if any.
    pub fn last_line(&self) -> Option<&[u8]> {
        (!self.last.is_empty()).then_some(&self.last[..])
    }

    /// Forgets the last line (a new activation starts).
    pub fn forget_last_line(&mut self) {
        self.last.clear();
    }

    /// Renders a line of the runtime's own about this stream's activation (a refused
    /// connection, say) into `out`: in JSON, under that activation's id.
    pub fn note(&self, message: &str, out: &mut Vec<u8>) {
        let labels = json().then(|| self.attribution.get());
        render(message.as_bytes(), self.stream, labels.as_deref(), out);
    }

    /// Whether an unfinished line is held.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn line(&mut self, line: &[u8], labels: Option<&Labels>, out: &mut Vec<u8>) {
        let cut;
        let line = if line.len() > LINE_MAX {
            let mut start = line[..floor_char_boundary(line, LINE_MAX)].to_vec();
            start.extend_from_slice(CUT_MARKER.as_bytes());
            cut = start;
            &cut[..]
        } else {
            line
        };
        if !line.trim_ascii().is_empty() {
            self.last.clear();
            self.last
                .extend_from_slice(&line[..floor_char_boundary(line, LAST_LINE_KEPT)]);
        }
        render(line, self.stream, labels, out);
    }
}

/// Renders one line (without its newline) into `out`: as it is, or as JSON with `labels`.
pub fn render(line: &[u8], stream: Stream, labels: Option<&Labels>, out: &mut Vec<u8>) {
    let Some(labels) = labels else {
        out.extend_from_slice(line);
        out.push(b'\n');
        return;
    };
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry<'a> {
        time: String,
        stream: &'static str,
        activation_id: &'a str,
        namespace: &'a str,
        action: &'a str,
        message: std::borrow::Cow<'a, str>,
    }
    let entry = Entry {
        time: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
        stream: stream.name(),
        activation_id: &labels.activation_id,
        namespace: &labels.namespace,
        action: &labels.action,
        message: String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)),
    };
    serde_json::to_writer(&mut *out, &entry).expect("strings always serialize");
    out.push(b'\n');
}

/// A line of the runtime's own, on stderr: as it is, or (in JSON) attributed to no
/// activation, so that a collector parsing every line as JSON never meets plain text.
pub fn runtime_line(message: &str) {
    let mut out = Vec::with_capacity(message.len() + 1);
    let labels = json().then(|| Labels {
        action: "wasmloop".to_owned(),
        ..Labels::default()
    });
    render(
        message.as_bytes(),
        Stream::Stderr,
        labels.as_ref(),
        &mut out,
    );
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

    fn text(lines: &mut Lines, pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        for piece in pieces {
            lines.push(piece, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pieces_come_out_as_whole_lines_and_an_unfinished_one_at_the_end() {
        let mut lines = Lines::new(Stream::Stderr, Attribution::default());
        assert_eq!(text(&mut lines, &[b"a", b"b", b"c\nd"]), "abc\n");
        assert_eq!(text(&mut lines, &[b"e\n\nf"]), "de\n\n");
        assert_eq!(lines.last_line(), Some(&b"de"[..]));
        let mut out = Vec::new();
        lines.finish(&mut out);
        assert_eq!(out, b"f\n");
        assert!(!lines.has_pending());
    }

    #[test]
    fn a_line_past_the_cap_is_cut_with_a_marker_and_its_rest_dropped() {
        let mut lines = Lines::new(Stream::Stdout, Attribution::default());
        let long = vec![b'x'; LINE_MAX + 10];
        let out = text(&mut lines, &[&long, b"yyy", b"\nnext\n"]);
        let expected = format!("{}{CUT_MARKER}\nnext\n", "x".repeat(LINE_MAX));
        assert_eq!(out, expected);
        // A long line that comes whole, newline and all, is cut too.
        let whole = [&long[..], b"\n"].concat();
        assert_eq!(
            text(&mut lines, &[&whole]),
            format!("{}{CUT_MARKER}\n", "x".repeat(LINE_MAX))
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let bytes = "é".repeat(LINE_MAX).into_bytes();
        assert_eq!(floor_char_boundary(&bytes, 3) % 2, 0);
        assert!(std::str::from_utf8(&bytes[..floor_char_boundary(&bytes, 3)]).is_ok());
    }

    #[test]
    fn json_lines_carry_the_activation_and_the_stream() {
        let attribution = Attribution::default();
        attribution.set(Labels::of(
            br#"{"value":{"x":[1]},"activation_id":"a1","namespace":"ns","action_name":"/ns/hello"}"#,
        ));
        let labels = attribution.get();
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
        assert_eq!(Labels::of(b"not json"), Labels::default());
    }
}
