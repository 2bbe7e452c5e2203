//! What an upload is, told from its first bytes.

/// The kinds of upload docs/protocol.md 1.3 tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Zip,
    TarGz,
    Wasm,
    Elf,
    Script,
    Other,
}

pub const WASM_MAGIC: &[u8] = b"\0asm";

pub fn detect(bytes: &[u8]) -> Kind {
    match bytes {
        [b'P', b'K', 3, 4, ..] | [b'P', b'K', 5, 6, ..] | [b'P', b'K', 7, 8, ..] => Kind::Zip,
        [0x1f, 0x8b, 0x08, ..] => Kind::TarGz,
        [0, b'a', b's', b'm', ..] => Kind::Wasm,
        [0x7f, b'E', b'L', b'F', ..] => Kind::Elf,
        [b'#', b'!', ..] => Kind::Script,
        _ => Kind::Other,
    }
}

/// What to do about a Linux executable named as WebAssembly (`name`), which is never run
/// natively: its name says what its author meant.
pub fn elf_named_wasm(name: &str) -> String {
    format!(
        "{name} is a Linux executable (ELF), not WebAssembly: build it for WebAssembly \
         (`cargo build --target wasm32-wasip1`, `GOOS=wasip1 GOARCH=wasm go build`, `clang \
         --target=wasm32-wasi`), or, to run it natively, name it `exec` (in a zip) or give it \
         a name without `.wasm`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_numbers_decide_the_kind() {
        assert_eq!(detect(b"PK\x03\x04rest"), Kind::Zip);
        assert_eq!(detect(b"PK\x05\x06"), Kind::Zip);
        assert_eq!(detect(b"PK\x07\x08"), Kind::Zip);
        assert_eq!(detect(b"PK\x01\x02"), Kind::Other);
        assert_eq!(detect(b"\x1f\x8b\x08\x00"), Kind::TarGz);
        assert_eq!(detect(b"\0asm\x01\0\0\0"), Kind::Wasm);
        assert_eq!(detect(b"\x7fELF\x02"), Kind::Elf);
        assert_eq!(detect(b"#!/bin/sh\n"), Kind::Script);
        assert_eq!(detect(b"print('hi')"), Kind::Other);
        assert_eq!(detect(b"P"), Kind::Other);
        assert_eq!(detect(b""), Kind::Other);
    }
}
