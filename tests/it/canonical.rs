//! OpenWhisk's own runtime test cases (BasicActionRunnerTests, the ActionLoop container
//! tests) as one table, run against each backend: status, body and both streams, byte for
//! byte, so that no hint or feature of ours can add a line where the platform expects none.

use serde_json::{Value, json};

use crate::support::{Backend, SENTINEL, Server, init_binary, read};

/// What a response's body must be.
enum Body {
    /// These bytes exactly.
    Exact(&'static str),
    /// JSON holding at least these keys with these values (the test actions may say more).
    Holds(fn() -> Value),
}

/// One request of a case and its answer.
struct Exchange {
    path: &'static str,
    /// The request body: `Action` stands for the case's action as an `/init` body.
    request: Request,
    status: u16,
    body: Body,
}

enum Request {
    Action,
    Json(fn() -> Value),
}

/// What each stream holds once its sentinels are taken out.
enum Streams {
    /// Nothing at all.
    Empty,
    /// Per activation, the action's line on stdout and on stderr, as the backend carries
    /// them (a WebAssembly guest's stdout is its result channel, so it logs both on stderr).
    EachActivation(&'static str, &'static str),
    /// These lines on stderr, nothing on stdout.
    Stderr(&'static str),
}

struct Case {
    /// The test's name in OpenWhisk's suites.
    name: &'static str,
    /// The test action of tests/guest the case installs.
    guest: &'static str,
    main: &'static str,
    init_env: Option<fn() -> Value>,
    /// Environment of the runtime itself (the platform's `docker run -e`).
    server_env: &'static [(&'static str, &'static str)],
    exchanges: &'static [Exchange],
    /// Sentinels on each stream: one per activation.
    sentinels: usize,
    streams: Streams,
}

const OK: Body = Body::Exact("{\"ok\":true}\n");
const INIT: Exchange = Exchange {
    path: "/init",
    request: Request::Action,
    status: 200,
    body: OK,
};

const CASES: &[Case] = &[
    Case {
        name: "handle initialization with no content",
        guest: "echo_quietly",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[Exchange {
            path: "/init",
            request: Request::Json(|| json!({})),
            status: 403,
            body: Body::Exact("{\"error\":\"Missing main/no code to execute.\"}\n"),
        }],
        sentinels: 0,
        streams: Streams::Empty,
    },
    Case {
        name: "handle initialization with no code",
        guest: "echo_quietly",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[Exchange {
            path: "/init",
            request: Request::Json(
                || json!({"value": {"code": "", "main": "", "binary": false, "env": null}}),
            ),
            status: 403,
            body: Body::Exact("{\"error\":\"Missing main/no code to execute.\"}\n"),
        }],
        sentinels: 0,
        streams: Streams::Empty,
    },
    Case {
        name: "run sample with init that does nothing",
        guest: "echo_quietly",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            Exchange {
                path: "/init",
                request: Request::Json(|| json!({})),
                status: 403,
                body: Body::Exact("{\"error\":\"Missing main/no code to execute.\"}\n"),
            },
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({})),
                status: 500,
                body: Body::Exact("{\"error\":\"no action defined yet\"}\n"),
            },
        ],
        sentinels: 0,
        streams: Streams::Empty,
    },
    Case {
        name: "run and report an error for function not returning a json object",
        guest: "non_object",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({})),
                status: 502,
                body: Body::Exact(
                    "{\"error\":\"The action did not return a dictionary or array.\"}\n",
                ),
            },
        ],
        sentinels: 1,
        streams: Streams::Empty,
    },
    Case {
        name: "fail to initialize a second time",
        guest: "echo_quietly",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/init",
                request: Request::Action,
                status: 403,
                body: Body::Exact("{\"error\":\"Cannot initialize the action more than once.\"}\n"),
            },
        ],
        sentinels: 0,
        streams: Streams::Stderr("Cannot initialize the action more than once."),
    },
    Case {
        name: "invoke non-standard entry point",
        guest: "echo_quietly",
        main: "niam",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"string": "hello"}})),
                status: 200,
                body: Body::Exact("{\"string\":\"hello\"}\n"),
            },
        ],
        sentinels: 1,
        streams: Streams::Empty,
    },
    Case {
        name: "echo arguments and print message to stdout/stderr",
        guest: "echo",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"string": "hello"}})),
                status: 200,
                body: Body::Exact("{\"string\":\"hello\"}\n"),
            },
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"string": "❄ ☃ ❄"}})),
                status: 200,
                body: Body::Exact("{\"string\":\"❄ ☃ ❄\"}\n"),
            },
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"numbers": [42, 1]}})),
                status: 200,
                body: Body::Exact("{\"numbers\":[42,1]}\n"),
            },
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"object": {"a": "A"}}})),
                status: 200,
                body: Body::Exact("{\"object\":{\"a\":\"A\"}}\n"),
            },
        ],
        sentinels: 4,
        streams: Streams::EachActivation("hello stdout", "hello stderr"),
    },
    Case {
        name: "handle unicode in source, input params, logs, and result",
        guest: "unicode",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"delimiter": "❄"}})),
                status: 200,
                body: Body::Exact("{\"winter\":\"❄ ☃ ❄\"}\n"),
            },
        ],
        sentinels: 1,
        streams: Streams::EachActivation("❄ ☃ ❄", "❄ ☃ ❄"),
    },
    Case {
        name: "export environment variables before initialization",
        guest: "init_env",
        main: "main",
        init_env: Some(|| json!({"SOME_VAR": "xyz", "ANOTHER_VAR": ""})),
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {}})),
                status: 200,
                // And nothing of the runtime's own environment (no PATH), as the reference.
                body: Body::Holds(|| json!({"SOME_VAR": "xyz", "ANOTHER_VAR": "", "PATH": null})),
            },
        ],
        sentinels: 1,
        streams: Streams::Empty,
    },
    Case {
        name: "confirm expected environment variables",
        guest: "context",
        main: "main",
        init_env: None,
        server_env: &[("__OW_API_HOST", "xyz")],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| {
                    json!({
                        "value": {},
                        "api_key": "abc",
                        "namespace": "zzz",
                        "action_name": "xxx",
                        "action_version": "0.0.1",
                        "activation_id": "iii",
                        "deadline": "123",
                    })
                }),
                status: 200,
                body: Body::Holds(|| {
                    json!({
                        "api_host": "xyz",
                        "api_key": "abc",
                        "namespace": "zzz",
                        "action_name": "xxx",
                        "action_version": "0.0.1",
                        "activation_id": "iii",
                        "deadline": "123",
                    })
                }),
            },
        ],
        sentinels: 1,
        streams: Streams::Empty,
    },
    Case {
        name: "echo a large input",
        guest: "echo_quietly",
        main: "main",
        init_env: None,
        server_env: &[],
        exchanges: &[
            INIT,
            Exchange {
                path: "/run",
                request: Request::Json(|| json!({"value": {"arg": "a".repeat(1_048_561)}})),
                status: 200,
                body: Body::Holds(|| json!({"arg": "a".repeat(1_048_561)})),
            },
        ],
        sentinels: 1,
        streams: Streams::Empty,
    },
];

/// Runs every case against `backend`; a failure names the case.
fn run_all(backend: Backend) {
    for case in CASES {
        run_case(backend, case);
    }
}

fn run_case(backend: Backend, case: &Case) {
    let name = case.name;
    let mut server = Server::builder();
    for (key, value) in case.server_env {
        server = server.env(key, value);
    }
    let server = server.start();
    let action = || {
        let mut body = init_binary(&read(&backend.guest(case.guest)));
        body["value"]["main"] = json!(case.main);
        body["value"]["env"] = case.init_env.map_or(Value::Null, |env| env());
        body
    };
    for exchange in case.exchanges {
        let request = match &exchange.request {
            Request::Action => action(),
            Request::Json(body) => body(),
        };
        let reply = server.post(exchange.path, request.to_string().as_bytes());
        assert_eq!(
            reply.status,
            exchange.status,
            "{name}: {} answered {}",
            exchange.path,
            reply.text()
        );
        match &exchange.body {
            Body::Exact(body) => assert_eq!(reply.text(), *body, "{name}: {}", exchange.path),
            Body::Holds(expected) => {
                let got = reply.json();
                for (key, value) in expected().as_object().unwrap() {
                    assert_eq!(&got[key], value, "{name}: {key} in {}", exchange.path);
                }
            }
        }
    }
    server.wait_sentinels(case.sentinels);
    // Lines with no sentinel after them are read from the server's stream on a thread of
    // their own: waited for, before the streams are compared whole.
    if let Streams::Stderr(lines) = case.streams {
        server.wait_stderr(lines);
    }
    let expected = match case.streams {
        Streams::Empty => (String::new(), String::new()),
        Streams::EachActivation(out, err) => {
            let (out, err) = backend.split_logs(&format!("{out}\n"), &format!("{err}\n"));
            (out.repeat(case.sentinels), err.repeat(case.sentinels))
        }
        Streams::Stderr(lines) => (String::new(), format!("{lines}\n")),
    };
    // Sentinels follow each activation's own lines (and the runtime writes any line of
    // its own about an activation before them, or before answering); nothing else is there.
    let without = |stream: String| {
        let count = stream.matches(SENTINEL).count();
        (count, stream.replace(&format!("{SENTINEL}\n"), ""))
    };
    assert_eq!(
        (without(server.stdout()), without(server.stderr())),
        ((case.sentinels, expected.0), (case.sentinels, expected.1)),
        "{name}: the streams (stdout, stderr) with their sentinel counts"
    );
}

#[test]
fn native() {
    run_all(Backend::Native);
}

#[test]
fn wasm() {
    run_all(Backend::Wasm);
}

#[test]
fn component() {
    run_all(Backend::Component);
}
