//! Opens a TCP connection: `{"tcp":"host:port","send":"PING\r\n"}` returns the first line
//! the peer answers, or the error the connect or the exchange met.
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use wasmloop_test_guest::json;

fn exchange(to: &str, send: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(to)?;
    stream.write_all(send.as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line.trim_end().to_owned())
}

fn main() {
    wasmloop_test_guest::serve(|value| {
        let to = value["tcp"].as_str().unwrap_or_default();
        let send = value["send"].as_str().unwrap_or_default();
        match exchange(to, send) {
            Ok(reply) => json!({ "reply": reply }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    });
}
