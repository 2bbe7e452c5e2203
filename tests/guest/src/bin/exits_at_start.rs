//! Exits before serving anything (and before any ack).
fn main() {
    eprintln!("exits_at_start: giving up");
    std::process::exit(1);
}
