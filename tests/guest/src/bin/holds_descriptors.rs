//! Keeps what it opens across activations: `{"files": N, "path": "/action/data.txt"}` opens
//! the file N more times, `{"tcp": "host:port", "connections": N}` connects N more times;
//! both answer how many it holds and the first error met. `{"release": true}` closes all;
//! `{"exit": true}` exits, holding what it holds.
use std::fs::File;
use std::net::TcpStream;

use wasmloop_test_guest::json;

fn main() {
    let mut files: Vec<File> = Vec::new();
    let mut connections: Vec<TcpStream> = Vec::new();
    wasmloop_test_guest::serve(|value| {
        if value["exit"].as_bool() == Some(true) {
            std::process::exit(3);
        }
        if value["release"].as_bool() == Some(true) {
            files.clear();
            connections.clear();
        }
        let mut error = None;
        let path = value["path"].as_str().unwrap_or("/action/data.txt");
        for _ in 0..value["files"].as_u64().unwrap_or(0) {
            match File::open(path) {
                Ok(file) => files.push(file),
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        let to = value["tcp"].as_str().unwrap_or_default();
        for _ in 0..value["connections"].as_u64().unwrap_or(0) {
            match TcpStream::connect(to) {
                Ok(stream) => connections.push(stream),
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        json!({ "files": files.len(), "connections": connections.len(), "error": error })
    });
}
