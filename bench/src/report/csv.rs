//! Every figure of the comparison, one CSV row per variant and connection count.

use super::*;

/// The columns. The first five kinds of cold start keep the places an older CSV gave their
/// medians; the kinds added later, and every kind's least and most, come after the columns
/// a reader of an older CSV knows, so that those keep their positions.
pub(super) fn csv_columns() -> Vec<String> {
    let words = |list: &str| list.split(',').map(str::to_owned).collect::<Vec<_>>();
    let cold = |sources: &[Source], suffixes: &[&str]| {
        let stems = sources.iter().map(|s| s.said().stem);
        stems
            .flat_map(|stem| suffixes.iter().map(move |suffix| format!("{stem}{suffix}")))
            .collect::<Vec<_>>()
    };
    [
        words(
            "label,backend,compiler,lifetime,connections,hits,p50_us,p50_min_us,p50_max_us,\
             p90_us,p99_us,p99_min_us,p99_max_us,max_us,req_s,req_s_min,req_s_max",
        ),
        cold(&Source::ALL[..5], &["_ms"]),
        words(
            "rss_after_init_bytes,rss_per_extra_instance_bytes,crash_to_answer_ms,errors,\
             cpu_us_reported,instance_memory_bytes_reported,server_cpu_us,client_cpu_us",
        ),
        cold(&Source::ALL[5..], &["_ms"]),
        cold(Source::ALL, &["_min_ms", "_max_ms"]),
    ]
    .concat()
}

/// A figure with `decimals` places; empty when there is none.
fn number(v: Option<f64>, decimals: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or(String::new(), |v| format!("{v:.decimals$}"))
}

/// The CSV's rows, also the HTML page's full table: one per variant and connection count,
/// and one with empty warm figures for a variant measured warm at no count, so no variant
/// goes missing.
pub(super) fn full_rows(c: &Comparison) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for v in &c.variants {
        let mut warms: Vec<Option<&Warm>> = v.warm.iter().map(Some).collect();
        warms.sort_by_key(|w| w.map(|w| w.connections));
        if warms.is_empty() {
            warms.push(None);
        }
        let cold = |source: Source, figure: fn(&Spread) -> f64| {
            number(v.cold_from(source).map(|c| figure(&c.millis)), 3)
        };
        let count = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
        let kind: &dyn std::fmt::Display = if v.row { &"row" } else { &v.form };
        for warm in warms {
            let w = |figure: fn(&Warm) -> f64| number(warm.map(figure), 1);
            // A figure over the rounds: its median, least and most.
            let spread = |figure: fn(&Warm) -> Spread| {
                let s = warm.map(figure);
                [s.map(|s| s.median), s.map(|s| s.min), s.map(|s| s.max)].map(|v| number(v, 1))
            };
            let mut row = vec![
                v.label.clone(),
                kind.to_string(),
                v.compiler.map(|c| c.to_string()).unwrap_or_default(),
                v.lifetime.to_string(),
                count(warm.map(|w| w.connections as u64)),
                count(warm.map(|w| w.micros.len() as u64)),
            ];
            row.extend(spread(|w| w.p50));
            row.push(w(|w| percentile(&w.micros, 90.0)));
            row.extend(spread(|w| w.p99));
            row.push(w(|w| w.micros.last().copied().unwrap_or(f64::NAN)));
            row.extend(spread(|w| w.per_second));
            row.extend(Source::ALL[..5].iter().map(|s| cold(*s, |s| s.median)));
            row.extend([
                count(v.resident_after_init),
                count(v.resident_per_extra_instance),
                number(v.crash_to_answer_ms.map(|s| s.median), 3),
                v.errors.to_string(),
                number(v.reported_cpu_us, 1),
                count(v.reported_memory),
                number(warm.and_then(|w| w.server_cpu_us), 1),
                number(warm.and_then(|w| w.client_cpu_us), 1),
            ]);
            row.extend(Source::ALL[5..].iter().map(|s| cold(*s, |s| s.median)));
            for source in Source::ALL {
                row.extend([cold(*source, |s| s.min), cold(*source, |s| s.max)]);
            }
            rows.push(row);
        }
    }
    rows
}

fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// One row per variant and connection count, under a header.
pub fn csv(c: &Comparison) -> String {
    let mut out = String::new();
    for row in std::iter::once(csv_columns()).chain(full_rows(c)) {
        let fields: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}
