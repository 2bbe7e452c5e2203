//! Returns its input after `{"sleep_ms": N}` asleep (blocked in a host call) or
//! `{"spin_ms": N}` busy (burning CPU, never calling the host); `{"sort": N}` sorts N
//! pseudo-random numbers, a fixed amount of work whose time shows how fast the code is.
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
        if let Some(n) = value["sort"].as_u64() {
            let mut x = 88172645463325252u64;
            let mut numbers: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                })
                .collect();
            numbers.sort_unstable();
            return wasmloop_test_guest::json!({ "median": numbers.get(numbers.len() / 2) });
        }
        value
    });
}
