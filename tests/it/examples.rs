//! The hello examples of native-examples/, as an action author would use them.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::{Server, init_binary, read};

const LANGUAGES: [&str; 4] = ["rust", "c", "go", "sh"];

fn built(file: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("native-examples/out")
        .join(file);
    assert!(
        path.is_file(),
        "{} is missing: run native-examples/build.sh first (it installs gcc, zip and Go if needed)",
        path.display()
    );
    path
}

fn says_hello(server: &Server) {
    server
        .run(json!({"name": "Mike"}))
        .assert(200, "{\"message\":\"Hello, Mike!\"}\n");
    server
        .run(json!({}))
        .assert(200, "{\"message\":\"Hello, Stranger!\"}\n");
    server.wait_stderr("hello: greeting Stranger");
}

#[test]
fn every_hello_serves_from_its_zip() {
    for lang in LANGUAGES {
        let server = Server::start();
        server
            .init(&init_binary(&read(&built(&format!("hello-{lang}.zip")))))
            .assert(200, "{\"ok\":true}\n");
        says_hello(&server);
    }
}

#[test]
fn every_hello_acks_when_asked() {
    for lang in LANGUAGES {
        let server = Server::builder().env("OW_WAIT_FOR_ACK", "1").start();
        server
            .init(&init_binary(&read(&built(&format!("hello-{lang}")))))
            .assert(200, "{\"ok\":true}\n");
        says_hello(&server);
    }
}

#[test]
fn every_hello_runs_once_given_its_input_as_an_argument() {
    for lang in LANGUAGES {
        let output = std::process::Command::new(built(&format!("hello-{lang}")))
            .arg(r#"{"name":"Mike"}"#)
            .output()
            .unwrap();
        assert!(output.status.success(), "{lang}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "{\"message\":\"Hello, Mike!\"}\n",
            "{lang}"
        );
    }
}
