//! Keeps `{"mib": N}` more mebibytes (touched) on each activation, and answers how many
//! activations it has served and how many mebibytes it keeps. `{"reserve_mib": N}` grows
//! its linear memory by N MiB it never touches (natively it does nothing).
fn main() {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut count = 0;
    wasmloop_test_guest::serve(|value| {
        if let Some(mib) = value["reserve_mib"].as_u64() {
            reserve(mib as usize);
        }
        let mib = value["mib"].as_u64().unwrap_or(0) as usize;
        kept.push(vec![1u8; mib * 1024 * 1024]);
        count += 1;
        let total: usize = kept.iter().map(Vec::len).sum();
        wasmloop_test_guest::json!({ "count": count, "kept_mib": total / (1024 * 1024) })
    });
}

#[cfg(target_family = "wasm")]
fn reserve(mib: usize) {
    core::arch::wasm32::memory_grow(0, mib * 16);
}

#[cfg(not(target_family = "wasm"))]
fn reserve(_mib: usize) {}
