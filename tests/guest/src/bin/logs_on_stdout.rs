//! Prints a log line on stdout before its result: in a WebAssembly guest, where stdout
//! carries the result, that is a mistake.
use std::io::Write;

fn main() {
    wasmloop_test_guest::serve(|value| {
        println!("working on {value}");
        std::io::stdout().flush().unwrap();
        value
    });
}
