//! Returns its input; given `{"garbage": true}` it first writes a line that is not JSON on
//! the result channel (as a stray debug print would), then the answer.
fn main() {
    wasmloop_test_guest::serve_lines(|value| {
        if value["garbage"] == true {
            format!("debug: about to answer\n{value}")
        } else {
            value.to_string()
        }
    });
}
