//! Counts its activations: the count survives between runs of one instance or child.
//! `{"exit":true}` ends it, so that the next activation meets a fresh one.
fn main() {
    let mut count = 0;
    wasmloop_test_guest::serve(|value| {
        if value["exit"] == true {
            std::process::exit(3);
        }
        count += 1;
        wasmloop_test_guest::json!({ "count": count })
    });
}
