//! Fuzzes the JSON-lines framing: requests become exactly one line, and results read back
//! in arbitrary chunks are the input's non-blank lines, in order, within the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use wasmloop::executor::lines::{LineError, LineReader, frame_request, is_blank};

fuzz_target!(|data: &[u8]| {
    let Some((&cap, data)) = data.split_first() else { return };
    let cap = usize::from(cap) + 1;

    let framed = frame_request(data);
    assert_eq!(framed.iter().filter(|b| **b == b'\n').count(), 1);
    assert_eq!(framed.last(), Some(&b'\n'));

    let expected: Vec<&[u8]> = data
        .split_inclusive(|b| *b == b'\n')
        .filter(|line| line.ends_with(b"\n") && !is_blank(line))
        .collect();
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
        let (mut tx, rx) = tokio::io::duplex(7);
        let input = data.to_vec();
        let writer = tokio::spawn(async move {
            // Odd chunk sizes, so that lines straddle reads.
            for chunk in input.chunks(5) {
                if tx.write_all(chunk).await.is_err() {
                    return;
                }
            }
        });
        let mut reader = LineReader::new(rx);
        for want in expected {
            match reader.read_line(cap).await {
                Ok(line) => assert_eq!(&line[..], want),
                Err(LineError::TooLong(_)) => {
                    assert!(data.split(|b| *b == b'\n').any(|l| l.len() > cap), "no line is that long");
                    break;
                }
                Err(e) => panic!("lost a line: {e}"),
            }
        }
        drop(reader);
        let _ = writer.await;
    });
});
