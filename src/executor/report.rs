//! What an activation cost (wall time, CPU time, memory, which instance served it), measured by its pool and written at its end.

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::logs::{Labels, LogFormat};

/// Which instance (or native child) served an activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceUse {
    /// Made for it (or ahead of it), and serving for the first time.
    Fresh,
    /// It had served before.
    Reused,
    /// A module's instance reset in place to its state after start-up.
    Renewed,
}

impl InstanceUse {
    fn name(self) -> &'static str {
        match self {
            InstanceUse::Fresh => "fresh",
            InstanceUse::Reused => "reused",
            InstanceUse::Renewed => "renewed",
        }
    }
}

/// How an activation ended, as its report says it: what the metrics count it as, the
/// status its client was sent, and the failure's message.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: crate::metrics::Outcome,
    pub status: u16,
    pub error: Option<String>,
}

/// One activation's figures.
#[derive(Debug, Clone)]
pub struct Report {
    pub verdict: Verdict,
    /// From its arrival at the pool (queueing included) to its answer.
    pub wall: Duration,
    /// The CPU it used: an in-process instance's time on the runtime's threads while it
    /// ran; a native child's process time (all its threads) over the activation.
    pub cpu: Option<Duration>,
    /// The instance's memory: a WebAssembly instance's linear memory (which never
    /// shrinks: its peak), a native child's peak resident set.
    pub memory: Option<u64>,
    /// None for one that never had an instance (the shutdown stopped it as it waited).
    pub instance: Option<InstanceUse>,
    /// The action's start, on the first activation after its `/init`.
    pub init: Option<Duration>,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

impl Report {
    /// The figures as JSON: `outcome`, `status`, `error`, `wallMs`, `cpuMs`,
    /// `memoryBytes`, `instance`, `initMs`.
    pub fn to_json(&self) -> Value {
        let mut fields = Map::new();
        let verdict = &self.verdict;
        fields.insert("outcome".to_owned(), Value::from(verdict.outcome.label()));
        fields.insert("status".to_owned(), Value::from(verdict.status));
        if let Some(error) = &verdict.error {
            fields.insert("error".to_owned(), Value::from(error.as_str()));
        }
        fields.insert("wallMs".to_owned(), Value::from(ms(self.wall)));
        if let Some(cpu) = self.cpu {
            fields.insert("cpuMs".to_owned(), Value::from(ms(cpu)));
        }
        if let Some(memory) = self.memory {
            fields.insert("memoryBytes".to_owned(), Value::from(memory));
        }
        if let Some(instance) = self.instance {
            fields.insert("instance".to_owned(), Value::from(instance.name()));
        }
        if let Some(init) = self.init {
            fields.insert("initMs".to_owned(), Value::from(ms(init)));
        }
        Value::Object(fields)
    }

    /// The figures as a sentence, for a person.
    pub fn sentence(&self) -> String {
        let verdict = &self.verdict;
        let mut parts = vec![
            format!("{} ({})", verdict.outcome.label(), verdict.status),
            format!("{:.3} ms wall", ms(self.wall)),
        ];
        if let Some(cpu) = self.cpu {
            parts.push(format!("{:.3} ms CPU", ms(cpu)));
        }
        if let Some(memory) = self.memory {
            parts.push(format!(
                "{:.1} MiB memory",
                memory as f64 / (1024.0 * 1024.0)
            ));
        }
        if let Some(instance) = self.instance {
            parts.push(format!("{} instance", instance.name()));
        }
        if let Some(init) = self.init {
            parts.push(format!("after a {:.1} ms init", ms(init)));
        }
        let error = verdict
            .error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        format!("wasmloop: report: {}{error}", parts.join(", "))
    }

    /// Renders it for stderr: a record under the activation's labels in JSON (its
    /// figures in `report`), the sentence in text.
    pub fn render(&self, format: LogFormat, labels: Option<&Labels>, out: &mut Vec<u8>) {
        match (format, labels) {
            (LogFormat::Json, Some(labels)) => {
                crate::logs::render_report(&self.sentence(), labels, &self.to_json(), out)
            }
            _ => {
                out.extend_from_slice(self.sentence().as_bytes());
                out.push(b'\n');
            }
        }
    }
}

/// The CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Runs `future`, adding to `spent` the CPU time of the threads that poll it while they
/// do (an in-process instance runs inside those polls), when `on`.
pub async fn cpu_timed<F: Future>(future: F, spent: &mut Duration, on: bool) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if !on {
            return future.as_mut().poll(cx);
        }
        let before = thread_cpu();
        let polled = future.as_mut().poll(cx);
        *spent += thread_cpu().saturating_sub(before);
        polled
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_says_each_figure_and_leaves_out_what_is_unknown() {
        use crate::metrics::Outcome;
        let report = Report {
            verdict: Verdict {
                outcome: Outcome::Success,
                status: 200,
                error: None,
            },
            wall: Duration::from_micros(1234),
            cpu: Some(Duration::from_micros(800)),
            memory: Some(3 << 20),
            instance: Some(InstanceUse::Fresh),
            init: Some(Duration::from_millis(45)),
        };
        assert_eq!(
            report.to_json(),
            serde_json::json!({"outcome": "success", "status": 200, "wallMs": 1.234, "cpuMs": 0.8, "memoryBytes": 3145728, "instance": "fresh", "initMs": 45.0})
        );
        assert_eq!(
            report.sentence(),
            "wasmloop: report: success (200), 1.234 ms wall, 0.800 ms CPU, 3.0 MiB memory, fresh instance, after a 45.0 ms init"
        );
        let failed = Report {
            verdict: Verdict {
                outcome: Outcome::ActionError,
                status: 502,
                error: Some("command exited: it trapped".to_owned()),
            },
            cpu: None,
            memory: None,
            init: None,
            instance: Some(InstanceUse::Reused),
            ..report
        };
        assert_eq!(
            failed.to_json(),
            serde_json::json!({"outcome": "action_error", "status": 502, "error": "command exited: it trapped", "wallMs": 1.234, "instance": "reused"})
        );
        assert_eq!(
            failed.sentence(),
            "wasmloop: report: action_error (502), 1.234 ms wall, reused instance: command exited: it trapped"
        );
    }

    #[tokio::test]
    async fn cpu_spent_inside_the_polls_is_counted_and_only_when_asked() {
        // 30 ms of this thread's own CPU, however long a busy machine makes that take.
        let burn = || async {
            let until = thread_cpu() + Duration::from_millis(30);
            let mut x = 0u64;
            while thread_cpu() < until {
                x = x.wrapping_add(1);
            }
            x
        };
        let mut spent = Duration::ZERO;
        cpu_timed(burn(), &mut spent, true).await;
        assert!(spent >= Duration::from_millis(30), "{spent:?}");
        let mut off = Duration::ZERO;
        cpu_timed(burn(), &mut off, false).await;
        assert_eq!(off, Duration::ZERO);
    }
}
