//! Counts its activations: the count survives between runs of one instance or child.
fn main() {
    let mut count = 0;
    wasmloop_test_guest::serve(|_| {
        count += 1;
        wasmloop_test_guest::json!({ "count": count })
    });
}
