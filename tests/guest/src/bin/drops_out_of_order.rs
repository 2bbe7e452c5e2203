//! `{"drop":"wrong"}` drops a wasi:io stream before the pollable made from it, which traps
//! a component ("resource has children"); anything else is echoed.

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn drop_in_the_wrong_order() {
    let stdin = wasi::cli::stdin::get_stdin();
    let pollable = stdin.subscribe();
    drop(stdin);
    drop(pollable);
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn drop_in_the_wrong_order() {
    panic!("only components have wasi resources");
}

fn main() {
    wasmloop_test_guest::serve(|value| {
        if value["drop"] == "wrong" {
            drop_in_the_wrong_order();
        }
        value
    });
}
