//! Returns its input; given `{"close": true}` it closes its result channel (fd 3) and
//! stays alive without answering.
fn main() {
    wasmloop_test_guest::serve(|value| {
        if value["close"] == true {
            #[cfg(not(target_os = "wasi"))]
            // SAFETY: fd 3 is ours; closing it under the writer is the behaviour under test.
            unsafe {
                close(3)
            };
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        value
    });
}

#[cfg(not(target_os = "wasi"))]
extern "C" {
    fn close(fd: i32) -> i32;
}
