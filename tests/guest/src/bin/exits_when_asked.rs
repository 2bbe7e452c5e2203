//! Returns its input, unless the input says `{"exit": CODE}` or `{"abort": true}`: then it
//! dies mid-activation.
fn main() {
    wasmloop_test_guest::serve(|value| {
        if let Some(code) = value["exit"].as_i64() {
            std::process::exit(code as i32);
        }
        if value["abort"] == true {
            std::process::abort();
        }
        value
    });
}
