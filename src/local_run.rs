//! `wasmloop run`: invoke an action locally through the same executors, without HTTP.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::config::Config;
use crate::metrics::Outcome;
use crate::runtime::{Action, Answered, Init, Input, Runtime};

/// What each input's request line carries besides its `value`, as the platform sends it.
pub struct RequestContext {
    /// The same id for every input; none: a fresh one each, as the platform gives.
    pub activation_id: Option<String>,
    pub namespace: String,
    pub action_name: String,
    /// Each activation's deadline is this far from when it is sent.
    pub timeout: std::time::Duration,
    /// Send each input line as the whole request line, as it is.
    pub raw: bool,
}

impl RequestContext {
    /// The request line for `input` (JSON text), the `made`-th of this run.
    fn request(&self, input: &str, made: u64) -> anyhow::Result<Vec<u8>> {
        let value: Value = serde_json::from_str(input)
            .map_err(|e| anyhow::anyhow!("the input is not JSON ({e}): {input}"))?;
        if self.raw {
            return Ok(input.as_bytes().to_vec());
        }
        let deadline = std::time::SystemTime::now() + self.timeout;
        let deadline = deadline
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let activation_id = self
            .activation_id
            .clone()
            .unwrap_or_else(|| crate::protocol::fresh_activation_id(made));
        Ok(json!({
            "value": value,
            "activation_id": activation_id,
            "deadline": deadline.to_string(),
            "namespace": self.namespace,
            "action_name": self.action_name,
        })
        .to_string()
        .into_bytes())
    }
}

/// Where the inputs come from.
pub enum Inputs {
    One(String),
    /// JSON values, one per line.
    Stdin,
}

/// `wasmloop run`'s exit status when an activation answered an application error (a result
/// object with an `"error"` key, which OpenWhisk reports as "application error") and none
/// failed outright.
pub const EXIT_APPLICATION_ERROR: u8 = 3;
/// Its exit status when an activation failed: the action gave no usable result (it exited
/// or trapped, ran out of time, answered no JSON object or array), OpenWhisk's "action
/// developer error".
pub const EXIT_ACTION_ERROR: u8 = 4;

/// How the inputs of a run fared, counted by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub application_errors: usize,
    pub action_errors: usize,
    /// Inputs that could not be sent: not JSON.
    pub bad_inputs: usize,
}

impl Tally {
    /// The exit status a script reads: 0 when every input succeeded, else the gravest kind
    /// of failure there was: 1 for an input that could not be sent (as for a run that
    /// could not start), then `EXIT_ACTION_ERROR`, then `EXIT_APPLICATION_ERROR`.
    pub fn exit_code(self) -> u8 {
        if self.bad_inputs > 0 {
            1
        } else if self.action_errors > 0 {
            EXIT_ACTION_ERROR
        } else if self.application_errors > 0 {
            EXIT_APPLICATION_ERROR
        } else {
            0
        }
    }

    /// One line for stderr, when any input failed: how many, of each kind.
    fn summary(self) -> Option<String> {
        let total = self.application_errors + self.action_errors + self.bad_inputs;
        let count = |n: usize, one: &str, many: &str| match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{n} {many}")),
        };
        let parts: Vec<String> = [
            count(self.action_errors, "action error", "action errors"),
            count(
                self.application_errors,
                "application error (\"error\" in its result)",
                "application errors (\"error\" in their results)",
            ),
            count(
                self.bad_inputs,
                "input that is not JSON",
                "inputs that are not JSON",
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        let inputs = if total == 1 { "input" } else { "inputs" };
        (total > 0).then(|| {
            format!(
                "{total} {inputs} failed: {} (exit status {})",
                parts.join(", "),
                self.exit_code()
            )
        })
    }
}

/// Initializes the action in `file`, then runs it once per input, printing each result
/// line on stdout and each failure on stderr (with the input's line number). A failing
/// input does not stop the others; at the end, a line on stderr counts the failures, and
/// what is returned (`Tally::exit_code`) tells a script how the run went. On Ctrl-C or
/// SIGTERM the action is stopped and its folder removed before returning.
pub async fn run(
    file: &Path,
    main: &str,
    env: Vec<(String, String)>,
    inputs: Inputs,
    context: RequestContext,
    mut config: Config,
) -> anyhow::Result<Tally> {
    config.fit_to_host();
    let runtime = Runtime::new(config, None);
    let outcome = tokio::select! {
        outcome = init_and_run(&runtime, file, main, env, inputs, &context) => outcome,
        _ = crate::signals::stopped() => {
            Err(anyhow::anyhow!("stopped by a signal (Ctrl-C or SIGTERM)"))
        }
    };
    // Kills the action and removes its folder, whatever happened.
    runtime.shutdown().await;
    outcome
}

async fn init_and_run(
    runtime: &Runtime,
    file: &Path,
    main: &str,
    env: Vec<(String, String)>,
    inputs: Inputs,
    context: &RequestContext,
) -> anyhow::Result<Tally> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    // The upload is only its bytes from here on: its name says what its author meant.
    if file.extension().is_some_and(|ext| ext == "wasm")
        && crate::action::detect::detect(&bytes) == crate::action::detect::Kind::Elf
    {
        anyhow::bail!(crate::action::detect::elf_named_wasm(
            &file.display().to_string()
        ));
    }
    let main = main.to_owned();
    runtime
        .install(Init {
            code: crate::runtime::Code::Upload(bytes.into()),
            main,
            env,
            name: None,
        })
        .await
        .map_err(|e| anyhow::anyhow!("cannot initialize {}: {e}", file.display()))?;
    let action = runtime
        .action()
        .context("the action vanished after /init")?;
    let mut out = Results {
        stdout: tokio::io::stdout(),
        tally: Tally::default(),
        made: 0,
        context,
    };
    match inputs {
        Inputs::One(input) => {
            out.activate(&action, None, &input).await?;
        }
        Inputs::Stdin => {
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let (mut number, mut any) = (0, false);
            while let Some(line) = lines.next_line().await? {
                number += 1;
                if line.trim().is_empty() {
                    continue;
                }
                any = true;
                if !out.activate(&action, Some(number), &line).await? {
                    // Nobody reads our results any more (`| head -1`): a quiet end.
                    return Ok(out.tally);
                }
            }
            if !any {
                bail!("no input: give --input JSON, or JSON values one per line on stdin");
            }
        }
    }
    if let Some(summary) = out.tally.summary() {
        crate::protocol::log_stderr(
            crate::logs::LogFormat::Text,
            &format!("wasmloop: {summary}"),
        );
    }
    Ok(out.tally)
}

/// Results to stdout, failures counted and told on stderr.
struct Results<'a> {
    stdout: tokio::io::Stdout,
    tally: Tally,
    /// Request lines made so far: each fresh activation id hashes its number.
    made: u64,
    context: &'a RequestContext,
}

impl Results<'_> {
    /// Runs one input; false once stdout is closed.
    async fn activate(
        &mut self,
        action: &Action,
        line: Option<usize>,
        input: &str,
    ) -> anyhow::Result<bool> {
        let which = line
            .map(|n| format!("input line {n}: "))
            .unwrap_or_default();
        self.made += 1;
        let result = match self.context.request(input, self.made) {
            Ok(line) => action
                .activate(Input::Body(line.into()))
                .await
                .map_err(|e| {
                    self.tally.action_errors += 1;
                    anyhow::Error::from(e)
                }),
            Err(e) => {
                self.tally.bad_inputs += 1;
                Err(e)
            }
        };
        match result {
            Ok(Answered { result, outcome }) => {
                if outcome == Outcome::ApplicationError {
                    self.tally.application_errors += 1;
                }
                let newline: &[u8] = if result.ends_with(b"\n") { b"" } else { b"\n" };
                let written = async {
                    self.stdout.write_all(&result).await?;
                    self.stdout.write_all(newline).await?;
                    self.stdout.flush().await
                };
                match written.await {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
                    Err(e) => Err(e).context("cannot write the result on stdout"),
                }
            }
            Err(e) => {
                // A person reads these: `wasmloop run` writes text.
                let message = format!("wasmloop: {which}{e:#}");
                crate::protocol::log_stderr(crate::logs::LogFormat::Text, &message);
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gravest_failure_sets_the_exit_status_and_the_summary_counts_each_kind() {
        let tally = |application_errors, action_errors, bad_inputs| Tally {
            application_errors,
            action_errors,
            bad_inputs,
        };
        assert_eq!(tally(0, 0, 0).exit_code(), 0);
        assert_eq!(tally(0, 0, 0).summary(), None);
        assert_eq!(tally(2, 0, 0).exit_code(), EXIT_APPLICATION_ERROR);
        assert_eq!(tally(2, 1, 0).exit_code(), EXIT_ACTION_ERROR);
        assert_eq!(tally(2, 1, 1).exit_code(), 1);
        assert_eq!(
            tally(1, 0, 0).summary().unwrap(),
            "1 input failed: 1 application error (\"error\" in its result) (exit status 3)"
        );
        assert_eq!(
            tally(2, 1, 3).summary().unwrap(),
            "6 inputs failed: 1 action error, 2 application errors (\"error\" in their \
             results), 3 inputs that are not JSON (exit status 1)"
        );
    }

    #[test]
    fn run_help_states_the_exit_statuses_it_returns() {
        let help = crate::cli::RUN_EXIT_STATUS;
        assert!(
            help.contains(&format!("{EXIT_APPLICATION_ERROR} when an answer")),
            "{help}"
        );
        assert!(
            help.contains(&format!("{EXIT_ACTION_ERROR} when an activation failed")),
            "{help}"
        );
    }
}
