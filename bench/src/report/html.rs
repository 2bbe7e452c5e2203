//! The comparison as one self-contained HTML page: a bottom line, conditions, verdicts, warnings, charts and every figure.

use super::*;

pub(super) const PAGE_TITLE: &str = "wasmloop bench: which backend for this action";

pub(super) const STYLE: &str = "\
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;\
color:#1d1d1f;background:#fff;max-width:1120px;margin:24px auto;padding:0 24px}\
h1{font-size:26px;margin:0 0 14px}\
h2{font-size:19px;margin:30px 0 10px;padding-bottom:4px;border-bottom:1px solid #ddd}\
dl.conditions{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0}\
dl.conditions dt{color:#555}dl.conditions dd{margin:0}\
code{font:13px ui-monospace,'DejaVu Sans Mono',monospace;background:#f3f3f3;padding:1px 4px;\
border-radius:3px;word-break:break-all}\
ul.verdicts{padding-left:22px}ul.verdicts li{margin:5px 0}\
ul.notes{list-style:none;padding:0}\
ul.notes li{background:#fff4d6;border-left:5px solid #d99a00;padding:7px 12px;margin:6px 0}\
.warn{font-weight:700;color:#8a5a00;margin-right:6px}\
p.quiet{color:#666}\
figure{margin:22px 0}\
svg{display:block;max-width:100%;height:auto;border:1px solid #e4e4e4;border-radius:4px}\
svg text{font-family:system-ui,'DejaVu Sans',sans-serif;font-size:13px;fill:#222}\
svg .title{font-size:17px;font-weight:600}\
svg .heading{font-size:14px;font-weight:600;fill:#333}\
svg .strong{font-weight:600}\
svg .tick{font-size:12px;fill:#555}\
svg .axis{font-size:13px;fill:#333}\
svg .value{font-size:12px;fill:#333}\
svg .note{font-size:12px;fill:#666}\
svg .key{font-size:12.5px;fill:#333}\
svg .none{font-size:16px;font-style:italic;fill:#888}\
svg .grid{stroke:#e8e8e8;stroke-width:1}\
svg .frame{fill:none;stroke:#999}\
svg .whisker{stroke:#333;stroke-width:1.4}\
.scroll{overflow-x:auto}\
table{border-collapse:collapse;font-size:12px}\
th,td{border:1px solid #ddd;padding:3px 6px;white-space:nowrap}\
th{background:#f3f3f3;text-align:left}\
tr>:first-child{position:sticky;left:0;background:#fff;box-shadow:1px 0 0 #ddd}\
th:first-child{background:#f3f3f3}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
p.wrong{background:#fde8e8;border-left:5px solid #c62828;padding:7px 12px}";

/// The run's conditions, as a list of names and values.
fn conditions(out: &mut String, c: &Comparison) {
    let k = &c.conditions;
    let counts = c.connection_counts();
    let s = if k.cpus == 1 { "" } else { "s" };
    let pinned = ["not pinned", "pinned with taskset"][usize::from(k.pinned)];
    let names = "wasmloop,CPU,connections,requests,rounds,concurrency,cold starts,date";
    let values = [
        format!("{} (commit {})", k.version, k.commit),
        format!("{}; {} CPU{s} usable, {pinned}", k.cpu_model, k.cpus),
        match counts.is_empty() {
            true => "none measured".to_owned(),
            false => listed(&counts),
        },
        format!("{} per variant and connection count", k.hits),
        format!("{}, interleaved across the variants", k.rounds),
        format!("{} (the servers' --concurrency)", k.concurrency),
        format!(
            "{} fresh servers per figure, the median with the least and most",
            k.cold_runs
        ),
        k.date.clone(),
    ];
    out.push_str("<dl class=\"conditions\">");
    for (name, value) in names.split(',').zip(values).chain(host_conditions(k)) {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&value));
    }
    let body = escape(&k.body);
    let _ = write!(out, "<dt>/run body</dt><dd><code>{body}</code></dd></dl>");
}

/// One self-contained page: the conditions, verdicts, warnings, charts and every figure.
pub fn html(c: &Comparison) -> String {
    let head = "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{head}<title>\
         {PAGE_TITLE}</title><style>{STYLE}</style></head><body>\n<h1>{PAGE_TITLE}</h1>\n\
         <section><h2>Bottom line</h2>"
    );
    // What matters first: wrong answers, then each form in a line, numbers and nature.
    for v in c.variants.iter().filter(|v| v.errors > 0) {
        let (label, errors) = (escape(&v.label), v.errors);
        let first = escape(v.first_wrong.as_deref().unwrap_or("not recorded"));
        let said = format!("{errors} answers were wrong; the first: <code>{first}</code>");
        out += &format!("<p class=\"wrong\"><strong>{label}</strong>: {said}</p>");
    }
    out.push_str("<ul class=\"verdicts\">");
    for line in verdicts(c, true) {
        let figures = match line.findings.is_empty() {
            true => String::new(),
            false => format!("{}. ", escape(&line.findings.join(", "))),
        };
        let (form, unmeasured) = (line.form, escape(line.unmeasured.unwrap_or_default()));
        out += &format!("<li><strong>{form}</strong>: {figures}<em>{unmeasured}.</em></li>");
    }
    out.push_str("</ul></section>\n<section><h2>Conditions</h2>");
    conditions(&mut out, c);
    out.push_str("</section>\n<section><h2>Verdicts</h2><ul class=\"verdicts\">");
    for verdict in verdicts(c, false) {
        // Its form in bold, then what it says of it.
        let (form, said) = (verdict.form, verdict.to_string());
        let said = escape(&said[form.to_string().len() + 2..]);
        let _ = write!(out, "<li><strong>{form}</strong>: {said}</li>");
    }
    out.push_str("</ul></section>\n<section><h2>Warnings</h2>");
    let notes = all_notes(c);
    let warn = "<li><span class=\"warn\">⚠ warning:</span>";
    let note = |n: &String| format!("{warn}{}</li>", escape(bare(n)));
    let notes: String = notes.iter().map(note).collect();
    match notes.is_empty() {
        true => out.push_str("<p class=\"quiet\">None.</p>"),
        false => out.push_str(&format!("<ul class=\"notes\">{notes}</ul>")),
    }
    out.push_str("</section>\n<section><h2>Charts</h2>\n");
    for (chart, left_out) in charts(c) {
        let left_out = left_out.map(|said| format!("<p class=\"quiet\">{}</p>", escape(&said)));
        let left_out = left_out.unwrap_or_default();
        let _ = writeln!(out, "<figure>{chart}{left_out}</figure>");
    }
    out.push_str("</section>\n<section><h2>All figures</h2><div class=\"scroll\"><table>");
    out.push_str("<thead><tr>");
    for column in csv_columns() {
        let _ = write!(out, "<th>{}</th>", escape(&column));
    }
    out.push_str("</tr></thead><tbody>");
    for row in full_rows(c) {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            // The first four name the row; the rest are figures.
            let class = if i < 4 { "" } else { " class=\"n\"" };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>\n</body></html>\n");
    out
}

/// The charts, each with what it leaves out and why, said under it so that a missing bar
/// reads as a fact: the latency chart at each connection count measured, then the bars.
fn charts(c: &Comparison) -> Vec<(String, Option<String>)> {
    let latency = c.connection_counts().into_iter().map(|n| {
        let not_at = format!("not measured at {}", connections_phrase(n));
        let left_out = left_out(c, |v| v.warm_at(n).is_none().then(|| not_at.clone()));
        (latency_chart(c, n, None), left_out)
    });
    let mut charts: Vec<_> = latency.collect();
    if charts.is_empty() {
        let why = "no variant was measured warm";
        charts.push((not_measured("latency", "latency by percentile", why), None));
    }
    charts.extend([
        (cold_chart(c), cold_left_out(c)),
        (memory_chart(c), memory_left_out(c)),
        (throughput_chart(c), throughput_left_out(c)),
        (crash_chart(c), crash_left_out(c)),
    ]);
    charts
}

/// What a chart leaves out, and why, as the sentence under it: each reason once, with the
/// variants it covers. None when every variant is in it.
fn left_out(c: &Comparison, why: impl Fn(&Variant) -> Option<String>) -> Option<String> {
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for v in &c.variants {
        let Some(reason) = why(v) else { continue };
        match reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, labels)) => labels.push(&v.label),
            None => reasons.push((reason, vec![&v.label])),
        }
    }
    let said = |(reason, labels): &(String, Vec<&str>)| format!("{} ({reason})", listed(labels));
    let said: Vec<String> = reasons.iter().map(said).collect();
    (!said.is_empty()).then(|| format!("Left out: {}.", said.join("; ")))
}

fn cold_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        let why = match v.lifetime {
            _ if !v.cold.is_empty() => return None,
            Lifetime::Fresh => {
                "a fresh instance per activation changes nothing at /init: its cold start is \
                 its persistent twin's"
            }
            Lifetime::Persistent | Lifetime::AsServed => "no fresh server of it was timed",
        };
        Some(why.to_owned())
    })
}

fn memory_left_out(c: &Comparison) -> Option<String> {
    let after_init = left_out(c, |v| {
        let not_read = "from what it holds after /init: not read";
        v.resident_after_init.is_none().then(|| not_read.to_owned())
    });
    let per_extra = left_out(c, |v| {
        let why = match v.lifetime {
            _ if v.resident_per_extra_instance.is_some() => return None,
            Lifetime::Fresh => "a fresh variant keeps none, each activation's is dropped",
            _ if c.conditions.concurrency <= 1 => "the servers ran one (--concurrency 1)",
            _ => "its memory was not read",
        };
        Some(format!("from what each extra instance adds: {why}"))
    });
    let said: Vec<String> = after_init.into_iter().chain(per_extra).collect();
    (!said.is_empty()).then(|| said.join(" "))
}

fn throughput_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        v.warm.is_empty().then(|| "not measured warm".to_owned())
    })
}

fn crash_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        let form = v.form;
        let why = match (form.server, form.backend, form.protocol, v.lifetime) {
            _ if v.crash_to_answer_ms.is_some() => return None,
            _ if v.row => "the rows crash nothing",
            (Server::Url, ..) => "a server given by --url is not crashed",
            (Server::WasmtimeServe, ..) => "the peer is not crashed",
            (_, _, Protocol::Plain, _) => {
                "a plain HTTP server takes the request itself, not a /run body that makes the \
                 action trap"
            }
            (_, Some(Backend::Native), _, Lifetime::Fresh) => {
                "a fresh native process lives for one activation: there is none to kill \
                 between two"
            }
            (_, Some(Backend::Native), ..) => "its process was not killed",
            _ => {
                "WebAssembly is crashed only from inside, by a request that makes it trap: give \
                 one with --crash-body"
            }
        };
        Some(why.to_owned())
    })
}

/// `text` safe as HTML's text and attribute values.
pub(super) fn escape(text: &str) -> String {
    // The ampersand first: the others' entities hold one.
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
