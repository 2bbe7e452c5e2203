//! Acknowledges start-up with JSON that does not say ok.
fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    wasmloop_test_guest::write_raw(&mut *out, r#"{"ok":false}"#);
    wasmloop_test_guest::serve_after_ack(&mut *out, &mut |v| v.to_string());
}
