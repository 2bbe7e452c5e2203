//! The SDKs' shared contract (sdk/contract.json), served by this crate.

use std::io::Cursor;

use serde::Deserialize;
use serde_json::{json, Value};
use wasmloop_action::Context;

/// The contract action, as sdk/contract.json describes it.
fn contract(value: Value, ctx: &Context<'_>) -> Result<Value, String> {
    match value["do"].as_str() {
        Some("deadline") => Ok(json!({ "deadline": match ctx.time_left() {
            None => "none",
            Some(left) if left.is_zero() => "past",
            Some(_) => "future",
        }})),
        Some("number") => Ok(json!(42)),
        Some("fail") => Err("asked to fail".to_owned()),
        Some("panic") => panic!("asked to panic"),
        Some("print") => {
            println!("printed");
            Ok(json!({ "printed": true }))
        }
        Some("greet") => {
            #[derive(Deserialize)]
            struct Greet {
                name: String,
            }
            // Typed arguments, as an action declares them: the crate reads the value into them.
            let mut answer = Vec::new();
            let line = json!({ "value": value }).to_string();
            wasmloop_action::serve_from(Cursor::new(line), &mut answer, |args: Greet, _| {
                Ok::<_, String>(json!({ "message": format!("Hello, {}!", args.name) }))
            });
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            match answer.get("error") {
                Some(error) => Err(error.as_str().unwrap().to_owned()),
                None => Ok(answer),
            }
        }
        _ => Ok(value),
    }
}

/// An input line of a case, as bytes.
fn line(entry: &Value) -> Vec<u8> {
    if let Some(text) = entry.as_str() {
        return text.as_bytes().to_vec();
    }
    if let Some(hex) = entry["hex"].as_str() {
        return (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
            .collect();
    }
    let size = entry["echo_of"].as_u64().unwrap() as usize;
    json!({"value": {"do": "echo", "s": "x".repeat(size)}})
        .to_string()
        .into_bytes()
}

/// Whether `answer` is what `expected` says.
fn matches(expected: &Value, answer: &Value) -> bool {
    let error = || {
        answer
            .as_object()
            .filter(|fields| fields.len() == 1)
            .and_then(|fields| fields.get("error"))
            .and_then(Value::as_str)
    };
    if let Some(value) = expected.get("exact") {
        return answer == value;
    }
    if let Some(start) = expected["error_starts"].as_str() {
        return error().is_some_and(|e| e.starts_with(start));
    }
    if let Some(part) = expected["error_has"].as_str() {
        return error().is_some_and(|e| e.contains(part));
    }
    if expected["error"] == true {
        return error().is_some();
    }
    let size = expected["echo_of"].as_u64().unwrap() as usize;
    *answer == json!({"do": "echo", "s": "x".repeat(size)})
}

#[test]
fn the_sdk_answers_every_case_of_the_shared_contract() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../contract.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 10, "{path} holds the cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        if case["differs"].get("rust").is_some() {
            continue;
        }
        let mut input = Vec::new();
        let lines = case["input"].as_array().unwrap();
        for (at, entry) in lines.iter().enumerate() {
            input.extend_from_slice(&line(entry));
            if at + 1 < lines.len() || case["last_without_newline"] != true {
                input.push(b'\n');
            }
        }
        let mut output = Vec::new();
        wasmloop_action::serve_from(Cursor::new(input), &mut output, contract);
        let answers: Vec<Value> = output
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        let expected = case["answers"].as_array().unwrap();
        assert_eq!(answers.len(), expected.len(), "{name}: {answers:?}");
        for (answer, expected) in answers.iter().zip(expected) {
            let shown: String = answer.to_string().chars().take(300).collect();
            assert!(
                matches(expected, answer),
                "{name}: expected {expected}, got {shown}"
            );
        }
    }
}
