//! Turning the `code` of an `/init` into bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// `binary: true` code is standard base64 with padding; line breaks inside it are ignored.
pub fn decode_code(code: &str, binary: bool) -> Result<Vec<u8>, base64::DecodeError> {
    if !binary {
        return Ok(code.as_bytes().to_vec());
    }
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
    fn plain_code_is_its_utf8_bytes() {
        assert_eq!(
            decode_code("#!/bin/sh ❄", false).unwrap(),
            "#!/bin/sh ❄".as_bytes()
        );
    }
}
