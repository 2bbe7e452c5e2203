//! The runtime's Prometheus metrics: counted where things happen, once `--metrics-listen` turns them on, and served in the text exposition format.

// Labels stay few and bounded: a backend's name, an outcome, a reason, a compiler; never
// an activation id, an action's text or a path. Counters are atomics: after N activations
// at any concurrency the count is N. The per-activation figures are resolved once per
// action (`ActionMetrics`), so an activation costs a clock read and a few atomic adds.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// How an activation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A result, without an `error` field (or a response, under 500).
    Success,
    /// A result with an `error` field, or a 5xx answer: the action's own word that it
    /// failed.
    ApplicationError,
    /// The action failed to answer (crashed, trapped, answered no JSON object).
    ActionError,
    /// Stopped at its deadline, or it waited past it for an instance.
    Timeout,
    /// It never ran: the queue was full (429), the runtime was stopping, or its input
    /// could not become what the action takes.
    Refused,
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Success,
        Outcome::ApplicationError,
        Outcome::ActionError,
        Outcome::Timeout,
        Outcome::Refused,
    ];

    /// How an activation that answered went: an `error` field in its result, or a 5xx
    /// status (a web action's `statusCode`, a response's), is the action's own word that
    /// it failed.
    pub fn answered(error_field: bool, status: u16) -> Outcome {
        if error_field || status >= 500 {
            Outcome::ApplicationError
        } else {
            Outcome::Success
        }
    }

    /// Its name: the metrics' `outcome` label and a report's `outcome`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::ApplicationError => "application_error",
            Outcome::ActionError => "action_error",
            Outcome::Timeout => "timeout",
            Outcome::Refused => "refused",
        }
    }
}

/// Why an instance (or a native child) was made.
#[derive(Debug, Clone, Copy)]
pub enum Made {
    /// The action's first, at `/init`.
    First,
    /// For an activation that found none idle: the pool growing, or one that ended
    /// (crashed, trapped, timed out) replaced.
    Demand,
    /// Ahead, for one that served its `--max-activations-per-instance`.
    Lifetime,
    /// Ahead, for one past `--recycle-above-memory`.
    Memory,
    /// Renewed in place (a module's memory and globals reset) instead of made anew.
    Renewed,
    /// From the optimized code, once a tiered compile has made it.
    Upgrade,
}

impl Made {
    fn label(self) -> &'static str {
        match self {
            Made::First => "first",
            Made::Demand => "demand",
            Made::Lifetime => "lifetime",
            Made::Memory => "memory",
            Made::Renewed => "renewed",
            Made::Upgrade => "upgrade",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ActivationLabels {
    backend: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CompileLabels {
    compiler: &'static str,
    /// `foreground` (the `/init` waits for it) or `background` (the tiered upgrade).
    role: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CodeLabels {
    /// The status class: `2xx` ... `5xx`.
    code: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Activation times, in bounds a person reads at a glance (and a dashboard's quantiles
/// interpolate between): 0.5 ms to 30 s.
const ACTIVATION_BOUNDS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Compile and start-up times: 1 ms to 10 min.
const SLOW_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

fn activation_histogram() -> Histogram {
    Histogram::new(ACTIVATION_BOUNDS)
}

fn slow_histogram() -> Histogram {
    Histogram::new(SLOW_BOUNDS)
}

/// Why a request was refused before (or instead of) reaching the action, as
/// `wasmloop_refusals_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 413: its body past `--max-init-bytes` or `--max-run-bytes`.
    BodyTooLarge,
    /// 408: its body slower than `--body-read-timeout`.
    BodyTimeout,
    /// 429: every instance busy and the queue full.
    Busy,
    /// 503: the runtime is stopping.
    ShuttingDown,
    /// 431: a request head past what the server reads.
    HeadTooLarge,
    /// 414: a URI past what the server reads.
    UriTooLong,
    /// 408 at the connection: its head slower than `--header-read-timeout`.
    HeadTimeout,
    /// 400: no HTTP request, or no Host under HTTP/1.1.
    BadRequest,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::BodyTimeout => "body_timeout",
            Refusal::Busy => "busy",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::UriTooLong => "uri_too_long",
            Refusal::HeadTimeout => "head_timeout",
            Refusal::BadRequest => "bad_request",
        }
    }
}

/// The process's own figures, as Prometheus' client libraries name them, read at each
/// scrape from /proc.
struct Process {
    cpu_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// What `cpu_seconds` has counted so far (it only goes up by the difference).
    cpu_counted: std::sync::Mutex<f64>,
    resident_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start_time: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Process {
    fn register(registry: &mut Registry) -> Process {
        let process = Process {
            cpu_seconds: Counter::default(),
            cpu_counted: std::sync::Mutex::new(0.0),
            resident_bytes: Gauge::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            start_time: Gauge::default(),
        };
        registry.register_with_unit(
            "process_cpu",
            "User and system CPU time the process has spent",
            Unit::Seconds,
            process.cpu_seconds.clone(),
        );
        registry.register_with_unit(
            "process_resident_memory",
            "Resident memory of the process (its instances' memory among it)",
            Unit::Bytes,
            process.resident_bytes.clone(),
        );
        registry.register(
            "process_open_fds",
            "Open file descriptors",
            process.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "The most file descriptors the process may open (RLIMIT_NOFILE)",
            process.max_fds.clone(),
        );
        registry.register_with_unit(
            "process_start_time",
            "When the process started, in seconds since the Unix epoch",
            Unit::Seconds,
            process.start_time.clone(),
        );
        process.start_time.set(started_at().unwrap_or(0.0));
        process
    }

    /// Reads the figures now.
    fn sample(&self) {
        if let Some(cpu) = cpu_seconds() {
            let mut counted = self.cpu_counted.lock().unwrap_or_else(|e| e.into_inner());
            if cpu > *counted {
                self.cpu_seconds.inc_by(cpu - *counted);
                *counted = cpu;
            }
        }
        if let Some(resident) =
            wasmloop_common::process::resident_bytes(0).and_then(|bytes| i64::try_from(bytes).ok())
        {
            self.resident_bytes.set(resident);
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            // The directory's own descriptor, open while it is read, is one of them.
            self.open_fds
                .set(i64::try_from(fds.count()).unwrap_or(i64::MAX) - 1);
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(max) = limit.current {
            self.max_fds.set(i64::try_from(max).unwrap_or(i64::MAX));
        }
    }
}

/// Clock ticks per second as /proc counts them (`USER_HZ`: 100 on every Linux port).
const USER_HZ: f64 = 100.0;

/// The fields of /proc/self/stat after the command's name (which may hold spaces).
fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// utime + stime (fields 14 and 15; 12 and 13 after the name), in seconds.
fn cpu_seconds() -> Option<f64> {
    let fields = stat_fields()?;
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / USER_HZ)
}

/// The process's start: the boot time (/proc/stat's `btime`) plus its start in ticks
/// after boot (/proc/self/stat field 22; 20 after the name).
fn started_at() -> Option<f64> {
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let ticks: f64 = stat_fields()?.get(19)?.parse().ok()?;
    Some(boot + ticks / USER_HZ)
}

/// `metric`, registered under `name` (with its unit, if any): the registry keeps one
/// handle, the caller the other.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric: M,
) -> M {
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, metric.clone()),
        None => registry.register(name, help, metric.clone()),
    }
    metric
}

pub struct Metrics {
    registry: Registry,
    activations: Family<ActivationLabels, Counter>,
    activation_seconds: Histograms<BackendLabels>,
    inits: Family<OutcomeLabels, Counter>,
    init_seconds: Histogram,
    instances: Gauge,
    instances_made: Family<ReasonLabels, Counter>,
    queue_depth: Gauge,
    queue_full: Counter,
    outbound_refused: Counter,
    compiles: Family<CompileLabels, Counter>,
    compile_seconds: Histograms<CompileLabels>,
    tier_ups: Counter,
    cache: Family<ResultLabels, Counter>,
    http_requests: Family<CodeLabels, Counter>,
    refusals: Family<ReasonLabels, Counter>,
    process: Process,
}

impl Metrics {
    /// A server's metrics (`--metrics-listen`): handed down to its runtime and backends,
    /// which count in them; nothing is process-wide.
    pub fn new() -> Metrics {
        Self::default()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let process = Process::register(&mut registry);
        let r = registry.sub_registry_with_prefix("wasmloop");
        let build: Family<BuildLabels, Gauge> = registered(
            r,
            "build_info",
            "The running build: its version and commit, as labels of a constant 1",
            None,
            Family::default(),
        );
        build
            .get_or_create(&BuildLabels {
                version: crate::config::PROXY_VERSION,
                commit: option_env!("WASMLOOP_COMMIT").unwrap_or("unknown"),
            })
            .set(1);
        Metrics {
            http_requests: registered(
                r,
                "http_requests",
                "Requests to the action under --protocol http, by the status class they were answered with (2xx, 3xx, 4xx, 5xx)",
                None,
                Family::default(),
            ),
            refusals: registered(
                r,
                "refusals",
                "Requests refused before or instead of reaching the action, by reason (body_too_large 413, body_timeout 408, busy 429, shutting_down 503, head_too_large 431, uri_too_long 414, head_timeout, bad_request 400)",
                None,
                Family::default(),
            ),
            process,
            activations: registered(
                r,
                "activations",
                "Activations by backend and outcome (success, application_error, action_error, timeout, refused)",
                None,
                Family::default(),
            ),
            activation_seconds: registered(
                r,
                "activation_duration",
                "How long activations took, from their request's arrival at the action to its answer",
                Some(Unit::Seconds),
                Family::new_with_constructor(activation_histogram),
            ),
            inits: registered(
                r,
                "inits",
                "Action starts (/init, or --action) by outcome",
                None,
                Family::default(),
            ),
            init_seconds: registered(
                r,
                "init_duration",
                "How long action starts took: unpacking, compiling or loading, the first instance",
                Some(Unit::Seconds),
                slow_histogram(),
            ),
            instances: registered(
                r,
                "instances",
                "Instances (or native children) alive, idle or busy",
                None,
                Gauge::default(),
            ),
            instances_made: registered(
                r,
                "instances_made",
                "Instances made, by reason (first, demand, lifetime, memory, renewed, upgrade)",
                None,
                Family::default(),
            ),
            queue_depth: registered(
                r,
                "queue_depth",
                "Activations waiting for a busy instance",
                None,
                Gauge::default(),
            ),
            queue_full: registered(
                r,
                "queue_full",
                "Activations refused with 429: every instance busy and the queue full",
                None,
                Counter::default(),
            ),
            outbound_refused: registered(
                r,
                "outbound_refused",
                "Outbound connections and requests the allow-list refused",
                None,
                Counter::default(),
            ),
            compiles: registered(
                r,
                "compiles",
                "WebAssembly compiles, by compiler and role",
                None,
                Family::default(),
            ),
            compile_seconds: registered(
                r,
                "compile_duration",
                "How long WebAssembly compiles took",
                Some(Unit::Seconds),
                Family::new_with_constructor(slow_histogram),
            ),
            tier_ups: registered(
                r,
                "tier_ups",
                "Actions moved from their quick code to the optimized code",
                None,
                Counter::default(),
            ),
            cache: registered(
                r,
                "compile_cache_lookups",
                "Compile cache lookups, by result (hit, miss)",
                None,
                Family::default(),
            ),
            registry,
        }
    }
}

impl Metrics {
    /// The exposition: OpenMetrics text, which Prometheus and its parsers read.
    pub fn encode(&self) -> String {
        self.process.sample();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    /// The counters one action's activations add to, resolved once for its backend.
    pub fn for_action(&self, backend: &'static str) -> ActionMetrics {
        let by_outcome = Outcome::ALL.map(|outcome| {
            self.activations.get_or_create_owned(&ActivationLabels {
                backend,
                outcome: outcome.label(),
            })
        });
        ActionMetrics {
            by_outcome,
            seconds: self
                .activation_seconds
                .get_or_create_owned(&BackendLabels { backend }),
        }
    }

    pub fn init(&self, succeeded: bool, took: Duration) {
        let outcome = if succeeded { "success" } else { "failure" };
        self.inits.get_or_create(&OutcomeLabels { outcome }).inc();
        self.init_seconds.observe(took.as_secs_f64());
    }

    pub fn instance_made(&self, why: Made) {
        self.instances_made
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc();
    }

    pub fn instances(&self) -> &Gauge {
        &self.instances
    }

    pub fn queue_depth(&self) -> &Gauge {
        &self.queue_depth
    }

    pub fn queue_full(&self) {
        self.queue_full.inc();
    }

    pub fn outbound_refused(&self) {
        self.outbound_refused.inc();
    }

    pub fn compiled(&self, compiler: &'static str, background: bool, took: Duration) {
        let labels = CompileLabels {
            compiler,
            role: if background {
                "background"
            } else {
                "foreground"
            },
        };
        self.compiles.get_or_create(&labels).inc();
        self.compile_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn tiered_up(&self) {
        self.tier_ups.inc();
    }

    /// A request to the action under `--protocol http`, answered with `status`.
    pub fn http_request(&self, status: u16) {
        let code = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.http_requests.get_or_create(&CodeLabels { code }).inc();
    }

    pub fn refused(&self, why: Refusal) {
        self.refusals
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc();
    }

    pub fn cache_lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.cache.get_or_create(&ResultLabels { result }).inc();
    }
}

/// One action's activation counters.
#[derive(Clone)]
pub struct ActionMetrics {
    by_outcome: [Counter; 5],
    seconds: Histogram,
}

impl ActionMetrics {
    pub fn activation(&self, outcome: Outcome, took: Duration) {
        self.by_outcome[outcome as usize].inc();
        self.seconds.observe(took.as_secs_f64());
    }
}

/// `GET /metrics`, for the listener of its own that `server::serve_metrics` runs.
pub fn app(metrics: std::sync::Arc<Metrics>) -> axum::Router {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || async move {
                let metrics = metrics.clone();
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }),
        )
        .fallback(|| async {
            (StatusCode::NOT_FOUND, "the metrics are at GET /metrics\n").into_response()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_times_are_in_the_exposition_under_bounded_labels() {
        let metrics = Metrics::new();
        let action = metrics.for_action("wasm");
        for _ in 0..3 {
            action.activation(Outcome::Success, Duration::from_micros(80));
        }
        action.activation(Outcome::Timeout, Duration::from_secs(2));
        metrics.instance_made(Made::First);
        metrics.queue_full();
        let text = metrics.encode();
        assert!(
            text.contains(r#"wasmloop_activations_total{backend="wasm",outcome="success"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"wasmloop_activations_total{backend="wasm",outcome="timeout"} 1"#));
        assert!(text.contains(r#"wasmloop_activation_duration_seconds_count{backend="wasm"} 4"#));
        assert!(text.contains(r#"wasmloop_instances_made_total{reason="first"} 1"#));
        assert!(text.contains("wasmloop_queue_full_total 1"));
        assert!(text.ends_with("# EOF\n"));
    }
}
