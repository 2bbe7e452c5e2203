//! Returns the text of `/action/<file>` (the archive's folder, read-only), or why it cannot.
fn main() {
    wasmloop_test_guest::serve(|value| {
        let file = value["file"].as_str().unwrap_or("data.txt");
        let path = format!("/action/{file}");
        let write_refused = std::fs::write("/action/new.txt", "x").is_err();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                wasmloop_test_guest::json!({ "text": text, "write_refused": write_refused })
            }
            Err(e) => wasmloop_test_guest::json!({ "error_kind": format!("{:?}", e.kind()) }),
        }
    });
}
