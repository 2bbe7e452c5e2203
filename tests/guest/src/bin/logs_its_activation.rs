//! Logs `{"lines": N}` lines naming `{"id": ID}` (the activation id the test also sends),
//! each written in three pieces with a pause between them, on stderr and (natively, where
//! stdout is a log stream) on stdout too; then `{"unfinished": TEXT}` on stderr as it is
//! (no newline added); then answers its input.
use std::io::Write;

fn main() {
    wasmloop_test_guest::serve(|value| {
        let id = value["id"].as_str().unwrap_or("none").to_owned();
        let lines = value["lines"].as_u64().unwrap_or(2);
        for n in 0..lines {
            pieces(&mut std::io::stderr(), &id, n);
            if cfg!(not(target_os = "wasi")) {
                pieces(&mut std::io::stdout(), &id, n);
            }
        }
        if let Some(text) = value["unfinished"].as_str() {
            let mut stderr = std::io::stderr();
            stderr.write_all(text.as_bytes()).unwrap();
            stderr.flush().unwrap();
        }
        value
    });
}

/// One line in three writes, flushed, so that another activation's writes can come between.
fn pieces(out: &mut dyn Write, id: &str, n: u64) {
    for piece in ["id ", id, &format!(" line {n}\n")] {
        out.write_all(piece.as_bytes()).unwrap();
        out.flush().unwrap();
        std::thread::yield_now();
    }
}
