//! Turning the `code` of an `/init` into bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::detect::{self, Kind};

/// `binary: true` code is standard base64 with padding; line breaks inside it are ignored.
/// Text code that is base64 of a WebAssembly module or an archive is decoded too: the
/// OpenWhisk CLI sends every file but a `.zip`, `.jar` or `.balx` as text, so base64 text
/// is how a module reaches a blackbox action without a zip.
pub fn decode_code(code: &str, binary: bool) -> Result<Vec<u8>, base64::DecodeError> {
    if !binary {
        let encodes_binary = encoded_kind(code.trim_start().as_bytes())
            .is_some_and(|kind| matches!(kind, Kind::Wasm | Kind::Zip | Kind::TarGz));
        if encodes_binary && let Ok(bytes) = decode_base64(code.trim()) {
            return Ok(bytes);
        }
        return Ok(code.as_bytes().to_vec());
    }
    decode_base64(code)
}

/// What the base64 text at the start of `head` encodes, judged by its first 6 bytes.
pub fn encoded_kind(head: &[u8]) -> Option<Kind> {
    let decoded = STANDARD.decode(head.get(..8)?).ok()?;
    Some(detect::detect(&decoded))
}

fn decode_base64(code: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // A char-set `contains` walks the text char by char: too slow for megabytes of base64.
    if memchr::memchr2(b'\r', b'\n', code.as_bytes()).is_some() {
        let joined: String = code.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        STANDARD.decode(joined)
    } else {
        STANDARD.decode(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_with_line_breaks_decodes() {
        assert_eq!(decode_code("aGVs\r\nbG8=\n", true).unwrap(), b"hello");
        assert_eq!(decode_code("aGVsbG8=", true).unwrap(), b"hello");
    }

    #[test]
    fn bad_base64_is_an_error() {
        assert!(decode_code("not base64!", true).is_err());
        assert!(decode_code("aGVsbG8", true).is_err(), "padding is required");
    }

    #[test]
    fn base64_text_of_a_module_or_archive_is_decoded_as_the_cli_sends_it() {
        assert_eq!(
            decode_code("AGFzbQEAAAA=\n", false).unwrap(),
            b"\0asm\x01\0\0\0"
        );
        assert_eq!(decode_code("UEsDBAo=", false).unwrap(), b"PK\x03\x04\n");
        // Text that only starts like it stays text.
        assert_eq!(
            decode_code("AGFzbQ not base64", false).unwrap(),
            b"AGFzbQ not base64"
        );
    }

    #[test]
    fn plain_code_is_its_utf8_bytes() {
        assert_eq!(
            decode_code("#!/bin/sh ❄", false).unwrap(),
            "#!/bin/sh ❄".as_bytes()
        );
    }
}
