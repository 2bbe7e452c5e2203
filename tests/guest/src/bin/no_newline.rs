//! The mistake of writing the result without its newline (flushed, but never a line).
use std::io::{BufRead, Write};

fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    for line in std::io::stdin().lock().lines() {
        let _request = line.unwrap();
        out.write_all(b"{\"count\":1}").unwrap();
        out.flush().unwrap();
    }
}
