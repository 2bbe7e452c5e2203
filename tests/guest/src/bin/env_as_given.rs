//! Returns `__OW_ACTIVATION_ID` as the runtime gave it in the environment: read as it
//! starts (Go's runtime reads its environment then) and again at each activation; unlike
//! the other test actions, it never sets it from the request line itself.
use std::io::BufRead;

use wasmloop_test_guest::{env, json, result_channel, write_raw};

fn main() {
    let at_start = env("__OW_ACTIVATION_ID");
    let mut out = result_channel();
    for line in std::io::stdin().lock().lines() {
        let _request = line.unwrap();
        let now = env("__OW_ACTIVATION_ID");
        write_raw(
            &mut *out,
            &json!({ "at_start": at_start, "now": now }).to_string(),
        );
    }
}
