//! Every figure of the comparison, one CSV row per variant and connection count.

use super::*;

/// Each kind of cold start's columns' stem, in `Source::ALL`'s order: its median's column
/// is `{stem}_ms`, its least and most `{stem}_min_ms` and `{stem}_max_ms`.
pub(super) const COLD_STEMS: [(Source, &str); 7] = [
    (Source::Compiled, "cold_compiled"),
    (Source::Cache, "cold_cache"),
    (Source::Signed, "cold_signed"),
    (Source::Receive, "receive_signed"),
    (Source::Start, "cold_start"),
    (Source::FirstAnswer, "cold_first_answer"),
    (Source::FirstCached, "cold_first_answer_cached"),
];

/// The first five kinds' medians keep their places among the columns; the kinds added
/// later, and every kind's least and most, come after the columns a reader of an older
/// CSV knows, so that those keep their positions.
pub(super) const CSV_COLUMNS: [&str; 46] = [
    "label",
    "backend",
    "compiler",
    "lifetime",
    "connections",
    "hits",
    "p50_us",
    "p50_min_us",
    "p50_max_us",
    "p90_us",
    "p99_us",
    "p99_min_us",
    "p99_max_us",
    "max_us",
    "req_s",
    "req_s_min",
    "req_s_max",
    "cold_compiled_ms",
    "cold_cache_ms",
    "cold_signed_ms",
    "receive_signed_ms",
    "cold_start_ms",
    "rss_after_init_bytes",
    "rss_per_extra_instance_bytes",
    "crash_to_answer_ms",
    "errors",
    "cpu_us_reported",
    "instance_memory_bytes_reported",
    "server_cpu_us",
    "client_cpu_us",
    "cold_first_answer_ms",
    "cold_first_answer_cached_ms",
    "cold_compiled_min_ms",
    "cold_compiled_max_ms",
    "cold_cache_min_ms",
    "cold_cache_max_ms",
    "cold_signed_min_ms",
    "cold_signed_max_ms",
    "receive_signed_min_ms",
    "receive_signed_max_ms",
    "cold_start_min_ms",
    "cold_start_max_ms",
    "cold_first_answer_min_ms",
    "cold_first_answer_max_ms",
    "cold_first_answer_cached_min_ms",
    "cold_first_answer_cached_max_ms",
];

/// The CSV's rows, also the HTML page's full table: one per variant and connection count,
/// and one with empty warm figures for a variant measured warm at no count, so no variant
/// goes missing.
pub(super) fn full_rows(c: &Comparison) -> Vec<Vec<String>> {
    let number = |v: f64, decimals: usize| {
        if v.is_finite() {
            format!("{v:.decimals$}")
        } else {
            String::new()
        }
    };
    let mut rows = Vec::new();
    for v in &c.variants {
        let mut warms: Vec<Option<&Warm>> = v.warm.iter().map(Some).collect();
        warms.sort_by_key(|w| w.map(|w| w.connections));
        if warms.is_empty() {
            warms.push(None);
        }
        for warm in warms {
            let mut row = vec![
                v.label.clone(),
                v.backend.to_string(),
                v.compiler.map(|c| c.to_string()).unwrap_or_default(),
                v.lifetime.to_string(),
            ];
            match warm {
                Some(w) => row.extend([
                    w.connections.to_string(),
                    w.micros.len().to_string(),
                    number(w.p50.median, 1),
                    number(w.p50.min, 1),
                    number(w.p50.max, 1),
                    number(percentile(&w.micros, 90.0), 1),
                    number(w.p99.median, 1),
                    number(w.p99.min, 1),
                    number(w.p99.max, 1),
                    number(w.micros.last().copied().unwrap_or(f64::NAN), 1),
                    number(w.per_second.median, 1),
                    number(w.per_second.min, 1),
                    number(w.per_second.max, 1),
                ]),
                None => row.extend((0..13).map(|_| String::new())),
            }
            let cold = |source: Source, figure: fn(&Spread) -> f64| {
                v.cold_from(source)
                    .map_or(String::new(), |c| number(figure(&c.millis), 3))
            };
            for (source, _) in &COLD_STEMS[..5] {
                row.push(cold(*source, |s| s.median));
            }
            let count = |b: Option<u64>| b.map_or(String::new(), |b| b.to_string());
            row.push(count(v.resident_after_init));
            row.push(count(v.resident_per_extra_instance));
            row.push(
                v.crash_to_answer_ms
                    .map_or(String::new(), |s| number(s.median, 3)),
            );
            row.push(v.errors.to_string());
            row.push(v.reported_cpu_us.map_or(String::new(), |us| number(us, 1)));
            row.push(count(v.reported_memory));
            let per_request = |us: Option<f64>| us.map_or(String::new(), |us| number(us, 1));
            row.push(per_request(warm.and_then(|w| w.server_cpu_us)));
            row.push(per_request(warm.and_then(|w| w.client_cpu_us)));
            for (source, _) in &COLD_STEMS[5..] {
                row.push(cold(*source, |s| s.median));
            }
            for (source, _) in &COLD_STEMS {
                row.push(cold(*source, |s| s.min));
                row.push(cold(*source, |s| s.max));
            }
            rows.push(row);
        }
    }
    rows
}

pub(super) fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// One row per variant and connection count, under a header.
pub fn csv(c: &Comparison) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for row in full_rows(c) {
        let fields: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}
