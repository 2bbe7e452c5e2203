//! Turning the `code` of an `/init` into bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::detect::{self, Kind};

/// Decodes the `code` of an /init where it lies, in `text`: the bytes end up at its start,
/// and their length is returned. Decoding a signed artifact's megabytes of base64 into new
/// memory would cost its fresh pages (dear on this VM), and the
/// text is not needed afterwards.
///
/// `binary: true` code is standard base64 with padding; line breaks inside it are ignored.
/// Text code that is base64 of a WebAssembly module or an archive is decoded too: the
/// OpenWhisk CLI sends every file but a `.zip`, `.jar` or `.balx` as text, so base64 text
/// is how a module reaches a blackbox action without a zip.
pub fn decode_code(text: &mut [u8], binary: bool) -> Result<usize, base64::DecodeError> {
    if binary {
        return decode_in_place(text);
    }
    let Ok(code) = std::str::from_utf8(text) else {
        return Ok(text.len());
    };
    let encodes_binary = encoded_kind(code.trim_start().as_bytes())
        .is_some_and(|kind| matches!(kind, Kind::Wasm | Kind::Zip | Kind::TarGz));
    if encodes_binary {
        // Decoded from a copy: text that only starts like base64 must stay as it is.
        let mut copy = code.trim().as_bytes().to_vec();
        if let Ok(length) = decode_in_place(&mut copy) {
            text[..length].copy_from_slice(&copy[..length]);
            return Ok(length);
        }
    }
    Ok(text.len())
}

/// What the base64 text at the start of `head` encodes, judged by its first 6 bytes.
pub fn encoded_kind(head: &[u8]) -> Option<Kind> {
    let decoded = STANDARD.decode(head.get(..8)?).ok()?;
    Some(detect::detect(&decoded))
}

/// Past this, the second half of the text is decoded on a second thread: a signed artifact
/// is megabytes of base64 on a cold /init's path (decoding the Go hello's alone shows in it).
const DECODE_IN_HALVES_FROM: usize = 1 << 20;

/// Decodes base64 text in place (see `decode_code`). Errors give offsets in the text
/// without its line breaks; for a text with one fault they are a whole-text decode's (with
/// several, the first piece's may be reported where the whole text's would be another).
fn decode_in_place(text: &mut [u8]) -> Result<usize, base64::DecodeError> {
    let length = drop_line_breaks(text);
    let text = &mut text[..length];
    if text.len() < DECODE_IN_HALVES_FROM {
        return decode_run(text, 0, true);
    }
    // Whole groups of 4 characters before the cut: the first half then decodes to exactly
    // 3 bytes per group, and the second half's bytes are moved down to follow them.
    let cut = text.len() / 2 / 4 * 4;
    let (first, second) = text.split_at_mut(cut);
    // Taken by the second thread, or by this one if the system refuses a thread.
    let second = std::sync::Mutex::new(Some(second));
    let decode_second = || match second.lock().map(|mut half| half.take()) {
        Ok(Some(half)) => decode_run(half, cut, true),
        _ => Err(base64::DecodeError::InvalidLength(0)),
    };
    let (head, tail) = std::thread::scope(|scope| {
        let tail = std::thread::Builder::new()
            .spawn_scoped(scope, decode_second)
            .ok();
        let head = decode_run(first, 0, false);
        let tail = match tail {
            // Decoding does not panic: were it to, the length error says something went wrong.
            Some(tail) => tail
                .join()
                .unwrap_or(Err(base64::DecodeError::InvalidLength(0))),
            None => decode_second(),
        };
        (head, tail)
    });
    let (head, tail) = (head?, tail?);
    text.copy_within(cut..cut + tail, head);
    Ok(head + tail)
}

/// Moves the text's characters over its line breaks; gives how many characters are left.
fn drop_line_breaks(text: &mut [u8]) -> usize {
    let (mut kept, mut from) = (0, 0);
    while let Some(found) = memchr::memchr2(b'\r', b'\n', &text[from..]) {
        text.copy_within(from..from + found, kept);
        kept += found;
        from += found + 1;
    }
    text.copy_within(from.., kept);
    kept + (text.len() - from)
}

/// Decodes `text` over itself, a cache-sized piece at a time: each piece is copied out,
/// then decoded over text already read (3 bytes take the place of 4 characters). Only the
/// `last` run may end in padding. `offset` is where `text` starts in the whole, for errors.
fn decode_run(text: &mut [u8], offset: usize, last: bool) -> Result<usize, base64::DecodeError> {
    use base64::DecodeError::{InvalidByte, InvalidLastSymbol, InvalidLength};
    const PIECE: usize = 64 * 1024;
    let mut piece = Vec::with_capacity(PIECE.min(text.len()));
    let (mut read, mut written) = (0, 0);
    while read < text.len() {
        let end = (read + PIECE).min(text.len());
        piece.clear();
        piece.extend_from_slice(&text[read..end]);
        let at = |e| match e {
            InvalidByte(i, byte) => InvalidByte(offset + read + i, byte),
            InvalidLastSymbol(i, byte) => InvalidLastSymbol(offset + read + i, byte),
            InvalidLength(n) => InvalidLength(offset + read + n),
            other => other,
        };
        let more = end < text.len() || !last;
        let mut decode = |piece: &[u8]| {
            STANDARD
                .decode_slice(piece, &mut text[written..end])
                .map_err(|e| match e {
                    base64::DecodeSliceError::DecodeError(e) => at(e),
                    // A piece decodes to fewer bytes than it has: this cannot happen.
                    base64::DecodeSliceError::OutputSliceTooSmall => InvalidLength(0),
                })
        };
        // Decoded alone, a piece may end in padding; in the whole text only the end may
        // (a fault before it is reported first, as the whole text would).
        if more {
            let quad = piece.len() - 4;
            if let Some(i) = piece[quad..].iter().position(|&c| c == b'=') {
                decode(&piece[..quad])?;
                return Err(at(InvalidByte(quad + i, b'=')));
            }
        }
        written += decode(&piece)?;
        read = end;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `decode_code` leaves at the start of `text`.
    fn decoded(text: &str, binary: bool) -> Result<Vec<u8>, base64::DecodeError> {
        let mut text = text.as_bytes().to_vec();
        let length = decode_code(&mut text, binary)?;
        text.truncate(length);
        Ok(text)
    }

    #[test]
    fn long_base64_decoded_in_place_is_the_same_bytes_and_errors_as_decoded_whole() {
        let bytes: Vec<u8> = (0..3 * DECODE_IN_HALVES_FROM / 4 + 2)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let text = STANDARD.encode(&bytes);
        assert!(text.len() >= DECODE_IN_HALVES_FROM && text.ends_with('='));
        assert_eq!(decoded(&text, true).unwrap(), bytes);
        let wrapped: String = (text.as_bytes().chunks(76))
            .map(|line| format!("{}\r\n", std::str::from_utf8(line).unwrap()))
            .collect();
        assert_eq!(decoded(&wrapped, true).unwrap(), bytes);
        // Each fault, in the first piece, inside and at the end of a piece of the first half,
        // at the cut, and in the second half, is reported as the whole text reports it.
        let cut = text.len() / 2 / 4 * 4;
        let faults = [
            (10, b'*'),
            (64 * 1024 - 1, b'='),
            (64 * 1024 - 2, b'='),
            (64 * 1024 + 5, b'*'),
            (cut - 1, b'='),
            (cut, b'*'),
            (text.len() - 100, b'*'),
            (text.len() - 3, b'='),
        ];
        // And a fault before padding inside a piece: the first is reported, as whole.
        let faults = faults
            .map(|fault| vec![fault])
            .into_iter()
            .chain([vec![(64 * 1024 - 100, b'*'), (64 * 1024 - 1, b'=')]]);
        for faults in faults {
            let mut bad = text.clone().into_bytes();
            for &(at, byte) in &faults {
                bad[at] = byte;
            }
            let bad = String::from_utf8(bad).unwrap();
            let whole = STANDARD.decode(&bad);
            assert!(whole.is_err(), "{faults:?} is a fault");
            assert_eq!(decoded(&bad, true), whole, "{faults:?}");
        }
        // Cut short by one, two or three characters.
        for short in 1..4 {
            let bad = &text[..text.len() - short];
            assert_eq!(decoded(bad, true), STANDARD.decode(bad), "{short} short");
        }
    }

    #[test]
    fn base64_with_line_breaks_decodes() {
        assert_eq!(decoded("aGVs\r\nbG8=\n", true).unwrap(), b"hello");
        assert_eq!(decoded("aGVsbG8=", true).unwrap(), b"hello");
    }

    #[test]
    fn bad_base64_is_an_error() {
        assert!(decoded("not base64!", true).is_err());
        assert!(decoded("aGVsbG8", true).is_err(), "padding is required");
    }

    #[test]
    fn base64_text_of_a_module_or_archive_is_decoded_as_the_cli_sends_it() {
        assert_eq!(
            decoded("AGFzbQEAAAA=\n", false).unwrap(),
            b"\0asm\x01\0\0\0"
        );
        assert_eq!(decoded("UEsDBAo=", false).unwrap(), b"PK\x03\x04\n");
        // Text that only starts like it stays text.
        assert_eq!(
            decoded("AGFzbQ not base64", false).unwrap(),
            b"AGFzbQ not base64"
        );
    }

    #[test]
    fn plain_code_is_its_utf8_bytes() {
        assert_eq!(
            decoded("#!/bin/sh ❄", false).unwrap(),
            "#!/bin/sh ❄".as_bytes()
        );
    }
}
