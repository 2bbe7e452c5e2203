//! The mistake of printing the result on stdout: natively, results go on fd 3.
use std::io::BufRead;

fn main() {
    for line in std::io::stdin().lock().lines() {
        let _request = line.unwrap();
        println!("{{\"count\":1}}");
    }
}
