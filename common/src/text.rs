//! Bytes of an action's (or a server's) output quoted on one line of a message.

/// The start of `bytes` as one line of text for a message: invalid UTF-8 replaced, control
/// characters escaped (quotes are not: the text is mostly JSON), cut after `max`
/// characters with an ellipsis.
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches(['\n', '\r']);
    let mut out = String::new();
    for c in text.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else if is_invisible(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Characters that print as nothing (or as a plain space) and so hide in a quoted line:
/// byte-order marks, zero-width and directional marks, non-breaking and odd spaces.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00a0}' | '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}'
        | '\u{17b4}' | '\u{17b5}' | '\u{180e}' | '\u{2000}'..='\u{200f}'
        | '\u{2028}'..='\u{202f}' | '\u{205f}'..='\u{206f}' | '\u{3000}' | '\u{3164}'
        | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_line_and_cut_short() {
        assert_eq!(excerpt(b"hello\n", 10), "hello");
        assert_eq!(excerpt(b"a\tb\"c", 10), "a\\tb\"c");
        assert_eq!(
            excerpt("x".repeat(12).as_bytes(), 10),
            format!("{}…", "x".repeat(10))
        );
        assert_eq!(excerpt(b"\xff!", 10), "\u{fffd}!");
        // Invisible characters are shown, as JSON would escape them.
        assert_eq!(
            excerpt("\u{feff}{}\u{200b}".as_bytes(), 10),
            "\\ufeff{}\\u200b"
        );
        // A server's answer: a `\r` or escape codes would garble a table.
        assert_eq!(excerpt(b"{\"a\":\"b\rc\"}\n", 200), "{\"a\":\"b\\rc\"}");
        assert_eq!(excerpt("ééé".as_bytes(), 2), "éé…");
        assert_eq!(excerpt(b"\x1b[31mred", 200), "\\u{1b}[31mred");
    }
}
