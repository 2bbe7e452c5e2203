//! Never gets past its start-up code: it never reads its input.
fn main() {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}
