//! Opens a TCP connection: `{"tcp":"host:port","send":"PING\r\n"}` returns the first line
//! the peer answers, or the error the connect or the exchange met. `{"udp":...}` sends one
//! datagram instead and returns the first one that comes back; `{"listen":"addr"}` tries
//! to listen for connections.
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};

use wasmloop_test_guest::json;

fn exchange(to: &str, send: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(to)?;
    stream.write_all(send.as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line.trim_end().to_owned())
}

fn datagram(to: &str, send: &str) -> std::io::Result<String> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.send_to(send.as_bytes(), to)?;
    let mut buffer = [0; 1500];
    let (n, _) = socket.recv_from(&mut buffer)?;
    Ok(String::from_utf8_lossy(&buffer[..n]).into_owned())
}

fn main() {
    wasmloop_test_guest::serve(|value| {
        let send = value["send"].as_str().unwrap_or_default();
        let answer = if let Some(addr) = value["listen"].as_str() {
            TcpListener::bind(addr).map(|l| format!("listening on {:?}", l.local_addr()))
        } else if let Some(to) = value["udp"].as_str() {
            datagram(to, send)
        } else {
            exchange(value["tcp"].as_str().unwrap_or_default(), send)
        };
        match answer {
            Ok(reply) => json!({ "reply": reply }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    });
}
