//! A WebAssembly action that does real work: renders CommonMark to HTML.
//!
//! `{"markdown":"# Hi\n*there*"}` → `{"html":"<h1>Hi</h1>\n<p><em>there</em></p>\n","words":2}`.
//! Optional `"options": ["tables", "strikethrough", "tasklists", "footnotes"]`.
//! It keeps a running count of documents rendered by this instance in `"rendered"`.

use std::io::{BufRead, Write};

use pulldown_cmark::{html, Options, Parser};
use serde_json::{json, Value};

fn render(args: &Value, rendered: u64) -> Value {
    let Some(markdown) = args["markdown"].as_str() else {
        return json!({ "error": "expected {\"markdown\": \"...\"}" });
    };
    let mut options = Options::empty();
    for option in args["options"].as_array().into_iter().flatten() {
        match option.as_str() {
            Some("tables") => options.insert(Options::ENABLE_TABLES),
            Some("strikethrough") => options.insert(Options::ENABLE_STRIKETHROUGH),
            Some("tasklists") => options.insert(Options::ENABLE_TASKLISTS),
            Some("footnotes") => options.insert(Options::ENABLE_FOOTNOTES),
            _ => return json!({ "error": format!("unknown option {option}") }),
        }
    }
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, Parser::new_ext(markdown, options));
    let words = markdown
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .count();
    eprintln!(
        "markdown: rendered {} bytes into {} bytes",
        markdown.len(),
        out.len()
    );
    json!({ "html": out, "words": words, "rendered": rendered })
}

fn main() {
    let mut stdout = std::io::stdout().lock();
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        writeln!(stdout, r#"{{"ok":true}}"#).unwrap();
        stdout.flush().unwrap();
    }
    let mut rendered = 0;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let result = match serde_json::from_str::<Value>(&line) {
            Ok(request) => {
                rendered += 1;
                render(&request["value"], rendered)
            }
            Err(e) => json!({ "error": format!("the request is not JSON: {e}") }),
        };
        writeln!(stdout, "{result}").unwrap();
        stdout.flush().unwrap();
    }
}
