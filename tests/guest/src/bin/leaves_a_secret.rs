//! Leaves a secret all over its memory (`{"leave": "text"}`: in a static, and 2 MiB of it
//! on its heap, each byte plus one, so that the request's own copy is not it), and answers whether its linear memory
//! holds the secret anywhere and how many pages it has (`{"find": "text"}`). An instance
//! fresh for each activation never finds what the one before left. Natively there is no
//! linear memory to look through: it answers `found: null`. `{"log": "text"}` logs the
//! text on stderr and answers; `{"abort": true}` aborts without a word (a trap in
//! WebAssembly), so that what the runtime says of it can only come from what was logged
//! before.
fn main() {
    wasmloop_test_guest::serve(|value| {
        if let Some(text) = value["log"].as_str() {
            eprintln!("{text}");
            return wasmloop_test_guest::json!({ "logged": true });
        }
        if value["abort"] == true {
            std::process::abort();
        }
        if let Some(secret) = value["leave"].as_str() {
            let shifted: Vec<u8> = secret.bytes().map(|b| b.wrapping_add(1)).collect();
            let mut left = Vec::with_capacity(2 << 20);
            while left.len() + shifted.len() <= left.capacity() {
                left.extend_from_slice(&shifted);
            }
            // Kept where it lies: dropped, the allocator might hand its pages back.
            std::hint::black_box(left.leak());
            in_a_static(&shifted);
            return wasmloop_test_guest::json!({ "left": true });
        }
        let secret = value["find"].as_str().unwrap_or_default();
        let needle: Vec<u8> = secret.bytes().map(|b| b.wrapping_add(1)).collect();
        let below = value["below"].as_u64().map(|b| b as usize);
        let (found, pages) = find(&needle, below.unwrap_or(usize::MAX));
        wasmloop_test_guest::json!({ "found": found, "pages": pages })
    });
}

/// Ones when the instance is made (the module's data), the secret once left.
static KEPT: std::sync::Mutex<[u8; 64 << 10]> = std::sync::Mutex::new([1; 64 << 10]);

/// Fills `KEPT` with `secret`. (Not a zeroed static: a guest's start-up may zero those.)
fn in_a_static(secret: &[u8]) {
    let mut kept = KEPT.lock().unwrap();
    for (at, byte) in kept.iter_mut().enumerate() {
        *byte = secret[at % secret.len()];
    }
}

/// Whether `needle` lies anywhere in linear memory but where it is itself, and the
/// memory's size in 64 KiB pages.
#[cfg(target_family = "wasm")]
fn find(needle: &[u8], below: usize) -> (Option<bool>, Option<usize>) {
    let pages = core::arch::wasm32::memory_size(0);
    let end = (pages * 65536).min(below);
    let own = needle.as_ptr() as usize;
    let found = (1..end.saturating_sub(needle.len())).any(|at| {
        // SAFETY: every address below the memory's size but 0 is readable in WebAssembly;
        // the bytes are only compared.
        at != own
            && needle
                .iter()
                .enumerate()
                .all(|(i, b)| unsafe { core::ptr::read_volatile((at + i) as *const u8) } == *b)
    });
    (Some(found), Some(pages))
}

#[cfg(not(target_family = "wasm"))]
fn find(_needle: &[u8], _below: usize) -> (Option<bool>, Option<usize>) {
    (None, None)
}
