//! The runtime's Prometheus metrics: counted where things happen, once `--metrics-listen` turns them on, and served in the text exposition format.

// Labels stay few and bounded: a backend's name, an outcome, a reason, a compiler; never
// an activation id, an action's text or a path. Counters are atomics: after N activations
// at any concurrency the count is N. The per-activation figures are resolved once per
// action (`ActionMetrics`), so an activation costs a clock read and a few atomic adds.

use std::sync::OnceLock;
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
    /// A result, without an `error` field.
    Success,
    /// A result with an `error` field: the action's own answer that it failed.
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

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Activation times: 50 µs to about 100 s.
fn activation_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.00005, 2.5, 16,
    ))
}

/// Compile and start-up times: 1 ms to about 10 min.
fn slow_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.5, 15,
    ))
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
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The metrics, once `enable` has turned them on; nothing is counted before.
pub fn get() -> Option<&'static Metrics> {
    METRICS.get()
}

/// Turns the metrics on (`--metrics-listen`): from now on everything is counted.
pub fn enable() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("wasmloop");
        let r = &mut registry;
        Metrics {
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

    /// The exposition: OpenMetrics text, which Prometheus and its parsers read.
    pub fn encode(&self) -> String {
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

/// Whether a result line is an application error: an object with a top-level `error`
/// field, which OpenWhisk reports as the action's failure. Parsed only when the word is
/// there at all, so a plain result costs one scan.
pub fn is_application_error(result: &[u8]) -> bool {
    if memchr::memmem::find(result, b"\"error\"").is_none() {
        return false;
    }
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(result)
        .is_ok_and(|fields| fields.contains_key("error"))
}

/// `GET /metrics`, for the listener of its own that `server::serve_metrics` runs.
pub fn app(metrics: &'static Metrics) -> axum::Router {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || async move {
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
    fn an_application_error_is_a_top_level_error_field_only() {
        assert!(is_application_error(br#"{"error":"no name"}"#));
        assert!(!is_application_error(br#"{"message":"hi"}"#));
        assert!(!is_application_error(br#"{"detail":{"error":1}}"#));
        assert!(!is_application_error(br#"{"text":"\"error\""}"#));
    }

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
