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
        decode_in_halves(joined.as_bytes())
    } else {
        decode_in_halves(code.as_bytes())
    }
}

/// Past this, the first half of the text is decoded on a second thread: a signed artifact
/// is megabytes of base64 on a cold /init's path (the Go hello's: 5.4 MB, ~5 ms alone).
const DECODE_IN_HALVES_FROM: usize = 1 << 20;

fn decode_in_halves(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::DecodeError::{InvalidByte, InvalidLastSymbol};
    if text.len() < DECODE_IN_HALVES_FROM {
        return STANDARD.decode(text);
    }
    // Whole groups of 4 characters before the cut: the first half then has no padding and
    // decodes to exactly 3 bytes per group.
    let cut = text.len() / 2 / 4 * 4;
    let (first, second) = text.split_at(cut);
    let mut bytes = vec![0; cut / 4 * 3 + base64::decoded_len_estimate(second.len())];
    let (head, tail) = bytes.split_at_mut(cut / 4 * 3);
    let (head, tail) = std::thread::scope(|scope| {
        let head = scope.spawn(|| STANDARD.decode_slice(first, head));
        let tail = STANDARD.decode_slice(second, tail);
        (
            head.join()
                .unwrap_or(Err(base64::DecodeSliceError::OutputSliceTooSmall)),
            tail,
        )
    });
    let shifted = |e: base64::DecodeError| match e {
        InvalidByte(at, byte) => InvalidByte(at + cut, byte),
        InvalidLastSymbol(at, byte) => InvalidLastSymbol(at + cut, byte),
        other => other,
    };
    let as_decode_error = |e: base64::DecodeSliceError| match e {
        base64::DecodeSliceError::DecodeError(e) => e,
        // The halves are sized for what they decode to: this cannot happen.
        base64::DecodeSliceError::OutputSliceTooSmall => base64::DecodeError::InvalidLength(0),
    };
    head.map_err(as_decode_error)?;
    let written = tail.map_err(|e| shifted(as_decode_error(e)))?;
    bytes.truncate(cut / 4 * 3 + written);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_base64_decoded_in_halves_is_the_same_bytes_and_errors() {
        let bytes: Vec<u8> = (0..3 * DECODE_IN_HALVES_FROM / 4 + 2)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let text = STANDARD.encode(&bytes);
        assert!(text.len() >= DECODE_IN_HALVES_FROM && text.ends_with('='));
        assert_eq!(decode_in_halves(text.as_bytes()).unwrap(), bytes);
        // A bad byte in the second half is reported where it is in the whole text.
        let mut bad = text.clone().into_bytes();
        let at = bad.len() - 100;
        bad[at] = b'*';
        assert_eq!(
            decode_in_halves(&bad),
            Err(base64::DecodeError::InvalidByte(at, b'*'))
        );
        let mut bad = text.into_bytes();
        bad[10] = b'*';
        assert_eq!(
            decode_in_halves(&bad),
            Err(base64::DecodeError::InvalidByte(10, b'*'))
        );
    }

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
