//! A backend of the test's own, registered from here through what the registry exposes: it claims its uploads by the closest claim, runs them behind the one `Executor` entry, and two equal claims are refused.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};
use wasmloop::action::{Entry, Prepared};
use wasmloop::config::Config;
use wasmloop::executor::pool::PoolSize;
use wasmloop::executor::registry::{Backend, Claim, Registration, StartFuture};
use wasmloop::executor::{
    ActivateFuture, Activation, Answer, Executor, Outcome, Payload, RunError, StartSpec,
};

use crate::support::{http, init_binary};

/// A toy language: a file whose first line is `#!toy GREETING`, answering each activation
/// with its greeting and the value it was given.
const TOY: Registration = Registration {
    name: "toy",
    runs: "toy script",
    made: "a file starting with #!toy",
    make: |_, _| Arc::new(Toy(Claim::Format)),
};

/// A second toy that claims the same files as closely: a mistake in the backends.
const RIVAL: Registration = Registration {
    name: "rival",
    runs: "toy script too",
    made: "a file starting with #!toy",
    make: |_, _| Arc::new(Toy(Claim::Format)),
};

struct Toy(Claim);

impl Backend for Toy {
    fn claims(&self, entry: &Entry) -> Option<Claim> {
        let Entry::File(path) = entry else {
            return None;
        };
        let text = std::fs::read(path).ok()?;
        text.starts_with(b"#!toy ").then_some(self.0)
    }

    fn start<'a>(
        &'a self,
        prepared: &'a Prepared,
        _spec: StartSpec,
        _config: &'a Config,
        _size: PoolSize,
    ) -> StartFuture<'a> {
        Box::pin(async move {
            let Entry::File(path) = &prepared.entry else {
                unreachable!("claimed as a file")
            };
            let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
            let greeting = text["#!toy ".len()..]
                .lines()
                .next()
                .unwrap_or("")
                .to_owned();
            Ok(Arc::new(Greeter(greeting)) as Arc<dyn Executor>)
        })
    }
}

struct Greeter(String);

impl Executor for Greeter {
    fn activate(
        &self,
        activation: Activation,
        _deadline: Option<tokio::time::Instant>,
    ) -> ActivateFuture<'_> {
        Box::pin(async move {
            let Payload::Line(line) = activation.payload else {
                return Err(RunError::BadInput(
                    "the toy takes request lines only".into(),
                ));
            };
            let request: Value =
                serde_json::from_slice(&line).map_err(|e| RunError::BadInput(e.to_string()))?;
            // The context came read: the toy answers with the id it names.
            let answer = json!({
                "greeting": self.0,
                "value": request["value"],
                "id": activation.context.activation_id(),
            });
            Ok(Answer::Line {
                line: format!("{answer}\n").into(),
                outcome: Outcome::Success,
            })
        })
    }

    fn takes_requests(&self) -> bool {
        false
    }

    fn stop(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }

    fn abandon(&self) {}
}

/// A server with the registered backends and `more`, until the returned sender is dropped.
fn serve_with(
    more: &'static [&'static Registration],
) -> (
    SocketAddr,
    std::thread::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let folder = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.action.dir = folder.path().to_owned();
    config.logs.sentinels = false;
    config.pool.shutdown_timeout = std::time::Duration::ZERO;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _folder = folder;
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let stop = async {
                let _ = stopped.await;
                wasmloop::signals::Stop::Interrupt
            };
            let served = Arc::new(wasmloop::runtime::Runtime::with_backends(
                config, None, more,
            ));
            wasmloop::server::serve(listener, served, stop)
                .await
                .unwrap();
        });
    });
    (addr, thread, stop)
}

#[test]
fn a_fifth_backend_registered_from_outside_claims_its_uploads_over_the_native_fallback() {
    static MORE: [&Registration; 1] = [&TOY];
    let (addr, thread, stop) = serve_with(&MORE);
    // An executable script the native backend would also take, as any file.
    let init = init_binary(b"#!toy hello\n");
    http(addr, "POST", "/init", init.to_string().as_bytes()).assert(200, "{\"ok\":true}\n");
    let run = json!({"value": {"name": "Ada"}, "activation_id": "a1"});
    let reply = http(addr, "POST", "/run", run.to_string().as_bytes());
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        reply.json(),
        json!({"greeting": "hello", "value": {"name": "Ada"}, "id": "a1"})
    );
    drop(stop);
    thread.join().unwrap();
}

#[test]
fn two_backends_claiming_an_upload_equally_closely_are_refused_naming_both() {
    static MORE: [&Registration; 2] = [&TOY, &RIVAL];
    let (addr, thread, stop) = serve_with(&MORE);
    let init = init_binary(b"#!toy hello\n");
    let reply = http(addr, "POST", "/init", init.to_string().as_bytes());
    assert_ne!(reply.status, 200);
    let error = reply.error();
    assert!(
        error.contains("the toy and rival backends both claim this upload, equally closely"),
        "{error}"
    );
    // What no toy claims still runs where it did: a shell script on the native backend.
    let script = init_binary(b"#!/bin/sh\nwhile read -r l; do echo '{\"sh\":1}' >&3; done\n");
    http(addr, "POST", "/init", script.to_string().as_bytes()).assert(200, "{\"ok\":true}\n");
    drop(stop);
    thread.join().unwrap();
}

/// The test action that shows a backend of the registry running, by its registration's
/// name; none for a backend the tests do not know yet.
/// A test action for the backend `name`, and what the runtime must be told to run it.
fn test_action(name: &str) -> Option<(Value, &'static [&'static str])> {
    use crate::support::Backend as Kind;
    let http = |guest: &std::path::Path| init_binary(&crate::support::read(guest));
    match name {
        "native" => Some((Kind::Native.init_guest("echo"), &[])),
        "wasm" => Some((Kind::Wasm.init_guest("echo"), &[])),
        "component" => Some((Kind::Component.init_guest("echo"), &[])),
        "http" => Some((http(&crate::support::http_guest()), &[])),
        "http-p3" => Some((http(&crate::support::p3_guest()), &["--wasip3"])),
        _ => None,
    }
}

/// The tests go by the registry's own list: a backend it gains fails here until the tests
/// have an action for it, and each runs one with no other backend allowed.
#[test]
fn every_backend_the_registry_lists_runs_a_test_action_alone() {
    for registration in wasmloop::executor::BACKENDS {
        let name = registration.name;
        let (init, needs) = test_action(name).unwrap_or_else(|| {
            panic!("the registry lists {name}, which no test runs: give it a test action here")
        });
        let server = crate::support::Server::builder()
            .args(&["--backends", name])
            .args(needs)
            .start();
        server.init(&init).assert(200, "{\"ok\":true}\n");
        let run = json!({"value": {"name": "x"}, "activation_id": "a1"});
        let reply = server.post("/run", run.to_string().as_bytes());
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
    }
}
