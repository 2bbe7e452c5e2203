//! Allocates (and touches) `{"mib": N}` mebibytes, then answers how many it got.
fn main() {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    wasmloop_test_guest::serve(|value| {
        let mib = value["mib"].as_u64().unwrap_or(0) as usize;
        let block = vec![1u8; mib * 1024 * 1024];
        let total = block.len();
        kept.clear();
        kept.push(block);
        wasmloop_test_guest::json!({ "allocated_mib": total / (1024 * 1024) })
    });
}
