//! Reads requests but never acknowledges start-up, nor answers.
use std::io::BufRead;
fn main() {
    for _ in std::io::stdin().lock().lines() {}
}
