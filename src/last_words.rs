//! What an action said as it crashed: the panic, abort or uncaught error that its language's runtime logged, found among its last log lines.
//!
//! A crash's own words are rarely its last line: Rust puts a hint about `RUST_BACKTRACE`
//! after the message, Go a goroutine dump after `panic: ...`, Python the traceback's
//! frames before the exception, JavaScript its stack after the error. Messages quote these
//! words; a crash in none of these shapes is quoted by its last line.

/// How many bytes of an instance's last log lines are kept to look in: a Go panic's
/// goroutine dump or a Python traceback of a few frames.
pub const KEPT: usize = 8 * 1024;

/// The lines of one crash report that a quote joins at most (Rust's message may span
/// lines).
const MESSAGE_LINES: usize = 3;

/// What a language's runtime reports after the guest's own report, saying less than it:
/// componentize-py's runtime panics once Python has printed the exception's traceback.
const AFTERWORDS: &[&str] = &["Python function threw an unexpected exception"];

/// The words of the most recent crash report among `tail`'s lines (oldest first, as the
/// guest wrote them), if one is there.
pub fn crash(tail: &str) -> Option<String> {
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty())
        .collect();
    let mut reports = (0..lines.len())
        .rev()
        .filter_map(|at| headline(lines[at], &lines[at + 1..]));
    let last = reports.next()?;
    if AFTERWORDS.iter().any(|words| last.contains(words)) {
        return Some(reports.next().unwrap_or(last));
    }
    Some(last)
}

/// The crash report that starts at `line`, if one does, `after` being the lines that
/// follow it.
fn headline(line: &str, after: &[&str]) -> Option<String> {
    // Rust: `thread 'main' panicked at src/main.rs:2:5:` with the message on the next lines
    // (before 1.73: `panicked at 'message', src/main.rs:2:5` on one line); the SDKs' own
    // `the action panicked at ...`.
    if line.contains("panicked at ") {
        if !line.ends_with(':') {
            return Some(line.to_owned());
        }
        let message: Vec<&str> = after
            .iter()
            .take_while(|l| !l.starts_with("note: ") && !l.starts_with("stack backtrace:"))
            .take(MESSAGE_LINES)
            .copied()
            .collect();
        return Some(
            std::iter::once(line)
                .chain(message)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    // Go: `panic: message` (`[recovered]` and nested panics on the lines after), or the
    // runtime's own `fatal error: ...`, each followed by the goroutines' stacks.
    if line.starts_with("panic: ") || line.starts_with("fatal error: ") {
        return Some(line.to_owned());
    }
    // C: wasi-libc's `assert` (`Assertion failed: x (main.c: act: 12)`) and glibc's
    // (`prog: main.c:12: act: Assertion `x' failed.`).
    if line.starts_with("Assertion failed: ") || line.contains(": Assertion `") {
        return Some(line.to_owned());
    }
    // Python: the traceback's frames are indented; the exception is the first line that
    // is not. A chained exception starts a traceback of its own, found first from the end.
    if line == "Traceback (most recent call last):" {
        return after
            .iter()
            .find(|l| !l.starts_with([' ', '\t']))
            .map(|l| (*l).to_owned());
    }
    // JavaScript in componentize-js (StarlingMonkey): an HTTP handler's uncaught error,
    // which it answers with a 500 of its own.
    if line.starts_with("Error while running request handler: ") {
        return Some(line.to_owned());
    }
    // JavaScript: `TypeError: message`, its stack's frames after it (`    at f (app.js:3)`
    // in V8's form, `f@app.js:3:5` in SpiderMonkey's).
    if is_js_error(line) && after.first().is_none_or(|next| is_js_frame(next)) {
        return Some(line.to_owned());
    }
    None
}

/// `Error: ...`, `TypeError: ...`, `Uncaught RangeError ...`: an error's first line.
fn is_js_error(line: &str) -> bool {
    let line = line.strip_prefix("Uncaught ").unwrap_or(line);
    let name_end = line
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    name.ends_with("Error") && (rest.is_empty() || rest.starts_with(": "))
}

fn is_js_frame(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.starts_with("at ") || (trimmed.contains('@') && trimmed.contains(':'))
}

/// `words` as a message quotes them: on one line, its control characters escaped.
pub fn quoted(words: &str) -> String {
    words
        .chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rusts_panic_is_its_place_and_message_not_the_backtrace_hint() {
        let tail = "handling a request\n\
                    thread '<unnamed>' panicked at src/lib.rs:9:9:\n\
                    asked to panic\n\
                    note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            crash(tail).as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:9:9: asked to panic")
        );
        let old = "thread 'main' panicked at 'boom', src/main.rs:2:5\nnote: run with ...\n";
        assert_eq!(
            crash(old).as_deref(),
            Some("thread 'main' panicked at 'boom', src/main.rs:2:5")
        );
        let sdk = "the action panicked at src/main.rs:13:26: asked to panic\n";
        assert_eq!(crash(sdk).as_deref(), Some(sdk.trim_end()));
    }

    #[test]
    fn gos_panic_is_its_first_line_not_the_goroutine_dump() {
        let tail = "starting\npanic: boom\n\ngoroutine 6 [running]:\nmain.act.func1()\n\
                    \t/src/main.go:20 +0x2\ncreated by main.act in goroutine 1\n\t/src/main.go:18 +0x5\n";
        assert_eq!(crash(tail).as_deref(), Some("panic: boom"));
        let fatal =
            "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\n";
        assert_eq!(
            crash(fatal).as_deref(),
            Some("fatal error: all goroutines are asleep - deadlock!")
        );
    }

    #[test]
    fn pythons_exception_is_the_tracebacks_last_unindented_line() {
        let tail = "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n\
                    \x20   raise ValueError(\"no CONFIG\")\n    ^^^^^^^^^^^^^^^^\nValueError: no CONFIG\n";
        assert_eq!(crash(tail).as_deref(), Some("ValueError: no CONFIG"));
        let chained = "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'a'\n\n\
                       During handling of the above exception, another exception occurred:\n\n\
                       Traceback (most recent call last):\n  File \"a.py\", line 3\nRuntimeError: second\n";
        assert_eq!(crash(chained).as_deref(), Some("RuntimeError: second"));
    }

    #[test]
    fn componentize_pys_own_panic_gives_way_to_the_python_exception_before_it() {
        let tail = "about to raise\nTraceback (most recent call last):\n  File \"/0/app.py\", line 8, in handle\n\
                    ValueError: asked to raise\n\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25:\n\
                    Python function threw an unexpected exception\n\
                    note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(crash(tail).as_deref(), Some("ValueError: asked to raise"));
        // Alone, it is what there is to say.
        let alone = "thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25:\n\
                     Python function threw an unexpected exception\n";
        assert_eq!(
            crash(alone).as_deref(),
            Some(
                "thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25: Python function threw an unexpected exception"
            )
        );
    }

    #[test]
    fn c_assertions_and_javascript_errors_are_their_own_lines() {
        assert_eq!(
            crash("Assertion failed: n > 0 (main.c: act: 12)\n").as_deref(),
            Some("Assertion failed: n > 0 (main.c: act: 12)")
        );
        assert_eq!(
            crash("hello: main.c:12: act: Assertion `n > 0' failed.\n").as_deref(),
            Some("hello: main.c:12: act: Assertion `n > 0' failed.")
        );
        let v8 = "TypeError: no such thing\n    at main (app.js:7:3)\n    at run (sdk.js:2:1)\n";
        assert_eq!(crash(v8).as_deref(), Some("TypeError: no such thing"));
        let spidermonkey = "Error: nothing catches this\nrun@app.js:5:11\n";
        assert_eq!(
            crash(spidermonkey).as_deref(),
            Some("Error: nothing catches this")
        );
        let starlingmonkey = "about to throw\nError while running request handler: asked to throw\nStack:\n  hello@app.js:3:9\n";
        assert_eq!(
            crash(starlingmonkey).as_deref(),
            Some("Error while running request handler: asked to throw")
        );
    }

    #[test]
    fn the_latest_report_wins_and_plain_logs_are_no_crash() {
        let tail = "panic: an old one\nTypeError: x\n    at f (a.js:1)\n";
        assert_eq!(crash(tail).as_deref(), Some("TypeError: x"));
        // A log line that reads like an error but has no stack after it is not one.
        assert_eq!(crash("Error: retrying\nconnected\n"), None);
        assert_eq!(crash("about to fail\n"), None);
        assert_eq!(crash(""), None);
    }

    #[test]
    fn a_quote_stays_on_one_line() {
        assert_eq!(quoted("a\tb \"c\" 'd'"), "a\\tb \"c\" 'd'");
    }
}
