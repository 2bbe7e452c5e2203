//! What a pool says of each activation besides the action's logs: its report (how it ended, its time, CPU and memory), and where it counts.

use std::sync::Arc;

use super::{Close, End, Pool, Worker};
use crate::executor::RunError;
use crate::executor::lines::ResultLine;
use crate::executor::report::{InstanceUse, Report};
use crate::lock;
use crate::metrics::Outcome;

/// What a pool writes of its own about each activation, beside the action's logs, and
/// where it counts.
#[derive(Clone)]
pub struct Reporting {
    pub end: End,
    /// Whether an answer that is not a JSON object or array is explained on stderr
    /// (`LogSettings::hints`); the HTTP body is the fixed message either way.
    pub hints: bool,
    /// How those lines are written.
    pub format: crate::logs::LogFormat,
    /// Whether each activation's logs end with its report (`LogSettings::reports`).
    pub reports: bool,
    /// Whether answers go out as plain HTTP responses (`--protocol http`), which a
    /// report's status follows.
    pub web: bool,
    /// Where instances, the queue and its refusals are counted.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Reporting {
    pub fn of(
        config: &crate::config::Config,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Reporting {
        Reporting {
            end: if config.logs.sentinels {
                End::Sentinels
            } else {
                End::Logs
            },
            hints: config.logs.hints,
            format: config.logs.format,
            reports: config.logs.reports,
            web: config.protocol == crate::config::Protocol::Http,
            metrics,
        }
    }
}

/// Unit tests' pools: no hints, no reports.
#[cfg(test)]
impl From<End> for Reporting {
    fn from(end: End) -> Reporting {
        Reporting {
            end,
            hints: false,
            format: crate::logs::LogFormat::Text,
            reports: false,
            web: false,
            metrics: None,
        }
    }
}

impl<W: Worker> Pool<W> {
    /// The end of an activation's logs with its report, the activation having ended as
    /// `verdict` says and taken `wall` and `cpu` on `worker`, found as `instance` says.
    pub(super) fn closed_with_report(
        &self,
        worker: &mut W,
        verdict: crate::executor::report::Verdict,
        wall: std::time::Duration,
        cpu: Option<std::time::Duration>,
        instance: InstanceUse,
    ) -> Close {
        let report = Report {
            verdict,
            wall,
            cpu,
            memory: worker.peak_memory_bytes(),
            instance: Some(instance),
            init: lock(&self.cold).take(),
        };
        let labels = worker.attribution().and_then(|a| a.labels());
        let mut rendered = Vec::new();
        report.render(self.reporting.format, labels.as_deref(), &mut rendered);
        Close::after(self.reporting.end, rendered)
    }

    /// Says what became of an activation stopped with the pool, which `activate` (saying
    /// so of every other failure) could not: it was dropped, its worker and the labels
    /// it held with it. A response already under way was cut short; the report, if asked
    /// for, says it was stopped.
    pub(super) fn say_stopped(
        &self,
        began: Option<std::time::Instant>,
        sent: u16,
        labels: Option<&crate::logs::Labels>,
    ) {
        if sent != 0 {
            crate::logs::runtime_line(
                self.reporting.format,
                labels,
                &format!(
                    "wasmloop: the response was cut short: {}",
                    RunError::Stopped
                ),
            );
        }
        if let Some(began) = began {
            let report = Report {
                verdict: self.verdict(&Err(RunError::Stopped), sent),
                wall: began.elapsed(),
                cpu: None,
                memory: None,
                instance: None,
                init: None,
            };
            let mut rendered = Vec::new();
            report.render(self.reporting.format, labels, &mut rendered);
            crate::logs::Stream::Stderr.write(&rendered);
        }
    }

    /// How an activation that ended with `result` went, as its report and the metrics
    /// say it: for a request served as it came, `sent` is the status its response went
    /// out with (0 if none did), which stands even for one cut short; a stdio action's
    /// result is the response under `--protocol http`, with its `statusCode`.
    pub(super) fn verdict(
        &self,
        result: &Result<Option<ResultLine>, RunError>,
        sent: u16,
    ) -> crate::executor::report::Verdict {
        // A status that went out stands, whatever the activation would have answered.
        let status = |own: u16| if sent != 0 { sent } else { own };
        let (outcome, status, error) = match result {
            Err(e) => (
                e.outcome(),
                status(e.status(self.reporting.web)),
                Some(e.to_string()),
            ),
            Ok(line) => {
                let asked = line
                    .as_ref()
                    .and_then(|line| line.status_code)
                    .filter(|_| self.reporting.web);
                let status = status(asked.unwrap_or(200));
                let error_field = line.as_ref().is_some_and(|line| line.error);
                (Outcome::answered(error_field, status), status, None)
            }
        };
        crate::executor::report::Verdict {
            outcome,
            status,
            error,
        }
    }
}
