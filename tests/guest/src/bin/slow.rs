//! Returns its input after `{"sleep_ms": N}` asleep (blocked in a host call) or
//! `{"spin_ms": N}` busy (burning CPU, never calling the host).
use std::time::{Duration, Instant};

fn main() {
    wasmloop_test_guest::serve(|value| {
        wasmloop_test_guest::log_stderr("slow: started");
        if let Some(ms) = value["sleep_ms"].as_u64() {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let Some(ms) = value["spin_ms"].as_u64() {
            let until = Instant::now() + Duration::from_millis(ms);
            let mut x = 0u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        value
    });
}
