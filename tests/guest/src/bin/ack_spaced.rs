//! Acknowledges start-up with `{"ok":true}` written with spaces, which is still ok.
fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    wasmloop_test_guest::write_raw(&mut *out, r#" { "ok" : true } "#);
    wasmloop_test_guest::serve_after_ack(&mut *out, &mut |v| v.to_string());
}
