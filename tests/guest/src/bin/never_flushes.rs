//! The mistake of buffering the result line and never flushing it.
use std::io::{BufRead, BufWriter, Write};

fn main() {
    let mut out = BufWriter::new(wasmloop_test_guest::result_channel());
    for line in std::io::stdin().lock().lines() {
        let _request = line.unwrap();
        out.write_all(b"{\"count\":1}\n").unwrap();
    }
}
