//! How a backend comparison reads: table, verdicts, warnings, CSV and one self-contained HTML page.

use std::fmt::Write as _;

/// A median with the least and most of the rounds (or runs) it comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// What the figures were measured under.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// wasmloop's version.
    pub version: String,
    /// Short git commit, or "unknown".
    pub commit: String,
    /// From /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs the run may use (its affinity).
    pub cpus: usize,
    /// Run under taskset to fewer CPUs than the machine has.
    pub pinned: bool,
    /// RFC 3339, UTC.
    pub date: String,
    /// Measured requests per row and connection count.
    pub hits: usize,
    /// Rounds the hits are split into, interleaved across rows.
    pub rounds: usize,
    /// The servers' `--concurrency`.
    pub concurrency: u16,
    /// The /run body sent (excerpt).
    pub body: String,
    /// Fresh servers per cold /init figure.
    pub cold_runs: usize,
}

/// One variant's warm figures at one connection count.
#[derive(Debug, Clone, Default)]
pub struct Warm {
    pub connections: usize,
    /// Every latency, sorted ascending, microseconds.
    pub micros: Vec<f64>,
    /// Per-round p50s, µs.
    pub p50: Spread,
    /// Per-round p99s, µs.
    pub p99: Spread,
    /// Per-round requests per second.
    pub per_second: Spread,
}

/// How long a fresh server's /init took, by where its code came from.
#[derive(Debug, Clone, Default)]
pub struct Cold {
    /// "compiled", "cache", "signed", or "start" (native: nothing to compile).
    pub source: String,
    /// Over `runs` fresh servers.
    pub millis: Spread,
    pub runs: usize,
}

/// One backend, compiler and instance lifetime.
#[derive(Debug, Clone, Default)]
pub struct Variant {
    /// "module", "component", "native", or "url".
    pub backend: String,
    /// "cranelift" or "winch", for modules and components.
    pub compiler: Option<String>,
    /// "persistent" or "fresh".
    pub lifetime: String,
    /// E.g. "module cranelift persistent".
    pub label: String,
    /// One per connection count.
    pub warm: Vec<Warm>,
    /// Empty on fresh variants (the same as their persistent twin's).
    pub cold: Vec<Cold>,
    /// Bytes.
    pub resident_after_init: Option<u64>,
    /// Bytes.
    pub resident_per_extra_instance: Option<u64>,
    /// From a crash to the next answer.
    pub crash_to_answer_ms: Option<Spread>,
    pub errors: usize,
    /// The first wrong answer, quoted, and what was expected.
    pub first_wrong: Option<String>,
}

impl Variant {
    /// A variant with nothing measured yet, labelled from its parts ("module cranelift
    /// persistent", "native fresh").
    pub fn named(backend: &str, compiler: Option<&str>, lifetime: &str) -> Variant {
        let label = [Some(backend), compiler, Some(lifetime)]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        Variant {
            backend: backend.to_owned(),
            compiler: compiler.map(str::to_owned),
            lifetime: lifetime.to_owned(),
            label,
            ..Variant::default()
        }
    }
}

/// Everything one comparison measured.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    pub conditions: Conditions,
    pub variants: Vec<Variant>,
    pub notes: Vec<String>,
}

/// Where a cold /init's code came from, in the order a reader meets them: the slowest
/// path first, then what each way of skipping the compiler saves.
const SOURCES: [&str; 4] = ["compiled", "cache", "signed", "start"];

impl Spread {
    fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

impl Variant {
    fn warm_at(&self, connections: usize) -> Option<&Warm> {
        self.warm.iter().find(|w| w.connections == connections)
    }

    fn cold_from(&self, source: &str) -> Option<&Cold> {
        self.cold.iter().find(|c| c.source == source)
    }

    /// What tells this variant from the others of its backend.
    fn flavour(&self) -> String {
        match &self.compiler {
            Some(compiler) => format!("{}, {compiler}", self.lifetime),
            None => self.lifetime.clone(),
        }
    }

    /// The compiler when that is the difference, else the whole label.
    fn short_name(&self) -> &str {
        self.compiler.as_deref().unwrap_or(&self.label)
    }
}

impl Comparison {
    fn connection_counts(&self) -> Vec<usize> {
        let mut counts: Vec<usize> = self
            .variants
            .iter()
            .flat_map(|v| v.warm.iter().map(|w| w.connections))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }

    /// The known sources first, in their order, then any other in the order met.
    fn sources(&self) -> Vec<&str> {
        let mut sources: Vec<&str> = SOURCES
            .into_iter()
            .filter(|s| self.variants.iter().any(|v| v.cold_from(s).is_some()))
            .collect();
        for cold in self.variants.iter().flat_map(|v| &v.cold) {
            if !sources.contains(&cold.source.as_str()) {
                sources.push(&cold.source);
            }
        }
        sources
    }

    fn backends(&self) -> Vec<&str> {
        let mut backends: Vec<&str> = Vec::new();
        for v in &self.variants {
            if !backends.contains(&v.backend.as_str()) {
                backends.push(&v.backend);
            }
        }
        backends
    }
}

/// Two significant figures below 10, whole numbers above: digits past those are noise in
/// figures that move by a few percent between runs.
fn figure(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_owned();
    }
    let magnitude = v.abs();
    let text = if magnitude >= 10.0 || magnitude == 0.0 {
        format!("{v:.0}")
    } else if magnitude >= 1.0 {
        format!("{v:.1}")
    } else if magnitude >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// The unit a time of `us` microseconds reads best in, and its size in microseconds; the
/// bounds are where `figure` would round up into the next unit.
fn time_unit(us: f64) -> (f64, &'static str) {
    if us.abs() < 999.5 {
        (1.0, "µs")
    } else if us.abs() < 999_500.0 {
        (1e3, "ms")
    } else {
        (1e6, "s")
    }
}

fn duration_us(us: f64) -> String {
    let (size, unit) = time_unit(us);
    format!("{} {unit}", figure(us / size))
}

fn duration_ms(ms: f64) -> String {
    duration_us(ms * 1e3)
}

/// Both ends in the unit of the larger, so the two read against each other.
fn range_us(lo: f64, hi: f64) -> String {
    let (size, unit) = time_unit(hi);
    let (lo, hi) = (figure(lo / size), figure(hi / size));
    // Two compilers that took the same time read as one figure.
    if lo == hi {
        format!("{hi} {unit}")
    } else {
        format!("{lo}–{hi} {unit}")
    }
}

fn rate(per_second: f64) -> String {
    if per_second >= 999.5 {
        format!("{}k", figure(per_second / 1e3))
    } else {
        figure(per_second)
    }
}

fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= f64::from(1 << 20) {
        format!("{} MiB", figure(b / f64::from(1 << 20)))
    } else {
        format!("{} KiB", figure(b / 1024.0))
    }
}

/// "1", "1 and 8", "1, 4 and 8".
fn listed<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn connections_phrase(n: usize) -> String {
    if n == 1 {
        "1 connection".to_owned()
    } else {
        format!("{n} connections")
    }
}

/// The sample at or above `p` of them (nearest rank).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

fn source_header(source: &str) -> &str {
    match source {
        "compiled" => "cmpl",
        "signed" => "sign",
        other => other,
    }
}

fn source_meaning(source: &str) -> &str {
    match source {
        "compiled" => "compiled at /init",
        "cache" => "from the compile cache",
        "signed" => "a signed precompiled artifact",
        "start" => "the native process starting",
        other => other,
    }
}

fn source_phrase(source: &str) -> &str {
    match source {
        "cache" => "from the cache",
        "start" => "to start",
        other => other,
    }
}

/// `c.notes`, then the overlap warnings it does not already hold: whether the measuring
/// side copies them in or not, each is said once.
fn all_notes(c: &Comparison) -> Vec<String> {
    let mut notes = c.notes.clone();
    for note in overlap_notes(c) {
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    notes
}

/// A note as said, without the "note: " the measuring side may have put before it: the
/// table and the page put their own marker.
fn bare(note: &str) -> &str {
    let note = note.trim();
    ["note: ", "warning: "]
        .iter()
        .find_map(|marker| note.strip_prefix(marker))
        .unwrap_or(note)
}

fn wrong_line(v: &Variant) -> String {
    let first = v.first_wrong.as_deref().unwrap_or("not recorded");
    format!(
        "{}: {} answers were wrong; the first: {first}",
        v.label, v.errors
    )
}

/// The terminal table, then the verdicts, the notes and the wrong answers.
pub fn table(c: &Comparison) -> String {
    let counts = c.connection_counts();
    let sources = c.sources();
    let spread = |s: &Spread| format!("{} [{}–{}]", figure(s.median), figure(s.min), figure(s.max));
    let kilo = |s: &Spread| Spread {
        median: s.median / 1e3,
        min: s.min / 1e3,
        max: s.max / 1e3,
    };

    let mut header = vec!["variant".to_owned()];
    for (i, n) in counts.iter().enumerate() {
        if i == 0 {
            header.extend([
                format!("p50@{n} µs"),
                format!("p99@{n}"),
                format!("kreq/s@{n}"),
            ]);
        } else {
            header.extend([format!("p50@{n}"), format!("kreq/s@{n}")]);
        }
    }
    header.extend(sources.iter().map(|s| source_header(s).to_owned()));
    header.extend(["MiB", "+KiB", "crash", "err"].map(str::to_owned));

    let mut rows = vec![header];
    for v in &c.variants {
        let mut row = vec![v.label.clone()];
        for (i, &n) in counts.iter().enumerate() {
            let warm = v.warm_at(n);
            let cell = |f: &dyn Fn(&Warm) -> String| warm.map_or("-".to_owned(), f);
            if i == 0 {
                row.push(cell(&|w| spread(&w.p50)));
                row.push(cell(&|w| figure(w.p99.median)));
                row.push(cell(&|w| spread(&kilo(&w.per_second))));
            } else {
                row.push(cell(&|w| figure(w.p50.median)));
                row.push(cell(&|w| figure(w.per_second.median / 1e3)));
            }
        }
        for s in &sources {
            row.push(
                v.cold_from(s)
                    .map_or("-".to_owned(), |c| figure(c.millis.median)),
            );
        }
        let mib = |b: u64| figure(b as f64 / f64::from(1 << 20));
        row.push(v.resident_after_init.map_or("-".to_owned(), mib));
        row.push(
            v.resident_per_extra_instance
                .map_or("-".to_owned(), |b| figure(b as f64 / 1024.0)),
        );
        row.push(
            v.crash_to_answer_ms
                .map_or("-".to_owned(), |s| figure(s.median)),
        );
        row.push(v.errors.to_string());
        rows.push(row);
    }

    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(line, "{cell:<width$}");
            } else {
                let _ = write!(line, "  {cell:>width$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }

    let mut legend = String::from("(");
    if let Some(first) = counts.first() {
        let _ = write!(
            legend,
            "@N: at N connections; latencies in µs; p50@{first} and kreq/s@{first} (thousands \
             of requests per second): median over rounds [least–most]; "
        );
    }
    if !sources.is_empty() {
        let named: Vec<String> = sources
            .iter()
            .map(|s| format!("{}: {}", source_header(s), source_meaning(s)))
            .collect();
        let _ = write!(
            legend,
            "cold /init ms ({}), median of {} fresh servers; ",
            named.join(", "),
            c.conditions.cold_runs
        );
    }
    legend.push_str(
        "MiB: resident after /init; +KiB: resident per extra instance; crash: ms from a crash \
         to the next answer; err: wrong answers)\n",
    );
    out.push_str(&legend);

    for verdict in verdicts(c) {
        out.push_str(&verdict);
        out.push('\n');
    }
    for note in all_notes(c) {
        let _ = writeln!(out, "note: {}", bare(&note));
    }
    for v in c.variants.iter().filter(|v| v.errors > 0) {
        out.push_str(&wrong_line(v));
        out.push('\n');
    }
    out
}

/// The backend that holds a record across the comparison: each backend counts with its
/// best variant for the record, and there is no record with fewer than two backends.
fn holder(c: &Comparison, figure: impl Fn(&Variant) -> Option<f64>, highest: bool) -> Option<&str> {
    let better = |a: f64, b: f64| if highest { a > b } else { a < b };
    let mut best: Vec<(&str, f64)> = Vec::new();
    for v in &c.variants {
        let Some(value) = figure(v).filter(|x| x.is_finite()) else {
            continue;
        };
        match best.iter_mut().find(|(b, _)| *b == v.backend) {
            Some(held) if better(value, held.1) => held.1 = value,
            Some(_) => {}
            None => best.push((&v.backend, value)),
        }
    }
    if best.len() < 2 {
        return None;
    }
    best.into_iter()
        .reduce(|a, b| if better(b.1, a.1) { b } else { a })
        .map(|(backend, _)| backend)
}

/// One sentence per backend, in the order the backends first appear.
pub fn verdicts(c: &Comparison) -> Vec<String> {
    let counts = c.connection_counts();
    let low = counts.first().copied();
    let high = counts.last().copied();
    let p50 = |v: &Variant| low.and_then(|n| v.warm_at(n)).map(|w| w.p50.median);
    let per_second = |v: &Variant| high.and_then(|n| v.warm_at(n)).map(|w| w.per_second.median);
    let cold_best = |v: &Variant| v.cold.iter().map(|c| c.millis.median).reduce(f64::min);
    let cold_worst = |v: &Variant| v.cold.iter().map(|c| c.millis.median).reduce(f64::max);
    let resident = |v: &Variant| v.resident_after_init.map(|b| b as f64);

    // Fresh instances are the price of isolation, not a backend's speed: the record is
    // held with the lifetime `warm_phrase` reports.
    let fastest_warm = holder(c, |v| p50(v).filter(|_| v.lifetime != "fresh"), false);
    let most_per_second = holder(c, per_second, true);
    let fastest_cold = holder(c, cold_best, false);
    let slowest_cold = holder(c, cold_worst, true);
    let least_memory = holder(c, resident, false);

    let mut out = Vec::new();
    for backend in c.backends() {
        let variants: Vec<&Variant> = c.variants.iter().filter(|v| v.backend == backend).collect();
        let holds = |record: Option<&str>| record == Some(backend);
        let mut parts = Vec::new();
        if let Some(low) = low {
            parts.extend(warm_phrase(&variants, low, holds(fastest_warm)));
        }
        if let (Some(high), true) = (high, holds(most_per_second)) {
            let best = variants
                .iter()
                .filter_map(|v| Some((*v, per_second(v).filter(|x| x.is_finite())?)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((v, value)) = best {
                parts.push(format!(
                    "most req/s at {} ({} req/s, {})",
                    connections_phrase(high),
                    rate(value),
                    v.flavour()
                ));
            }
        }
        // One backend holding both records (its cache beats everyone's start, its compile is
        // the slowest) is said by its figures alone: "fastest and slowest" tells nothing.
        let (fastest, slowest) = match (holds(fastest_cold), holds(slowest_cold)) {
            (true, true) => (false, false),
            held => held,
        };
        parts.extend(cold_phrase(c, &variants, fastest, slowest));
        parts.extend(memory_phrase(&variants, holds(least_memory)));
        if let Some(low) = low {
            parts.extend(fresh_phrase(&variants, low));
        }
        let crash = variants
            .iter()
            .filter_map(|v| v.crash_to_answer_ms.map(|s| s.median))
            .filter(|x| x.is_finite())
            .reduce(f64::min);
        if let Some(ms) = crash {
            parts.push(format!("answers again {} after a crash", duration_ms(ms)));
        }
        let errors: usize = variants.iter().map(|v| v.errors).sum();
        if errors > 0 {
            parts.push(format!(
                "{errors} wrong answer{}",
                if errors == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            out.push(format!("{backend}: nothing measured."));
        } else {
            out.push(format!("{backend}: {}.", parts.join("; ")));
        }
    }
    out
}

/// The backend's best p50 at the lowest connection count, in the lifetime it is usually
/// run in (persistent, when measured), and its other compilers beside it.
fn warm_phrase(variants: &[&Variant], low: usize, fastest: bool) -> Option<String> {
    let measured: Vec<(&Variant, f64)> = variants
        .iter()
        .filter_map(|v| Some((*v, v.warm_at(low)?.p50.median)))
        .filter(|(_, p50)| p50.is_finite())
        .collect();
    let persistent = measured.iter().any(|(v, _)| v.lifetime == "persistent");
    let pool: Vec<&(&Variant, f64)> = measured
        .iter()
        .filter(|(v, _)| !persistent || v.lifetime == "persistent")
        .collect();
    let best = pool.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let others: Vec<String> = pool
        .iter()
        .filter(|(v, _)| v.label != best.0.label)
        .map(|(v, p50)| format!("{} {}", v.short_name(), duration_us(*p50)))
        .collect();
    let mut inside = best.0.flavour();
    if !others.is_empty() {
        let _ = write!(inside, "; {}", others.join(", "));
    }
    let at = if low == 1 {
        String::new()
    } else {
        format!(" at {}", connections_phrase(low))
    };
    let p50 = duration_us(best.1);
    Some(if fastest {
        format!("fastest warm: p50 {p50}{at} ({inside})")
    } else {
        format!("warm p50 {p50}{at} ({inside})")
    })
}

fn cold_phrase(
    c: &Comparison,
    variants: &[&Variant],
    fastest: bool,
    slowest: bool,
) -> Option<String> {
    let mut said = Vec::new();
    // Per source, the variant with the lowest figure: named once if the same throughout.
    let mut quickest = Vec::new();
    for source in c.sources() {
        let mut figures: Vec<(f64, &Variant)> = variants
            .iter()
            .filter_map(|v| Some((v.cold_from(source)?.millis.median, *v)))
            .filter(|(ms, _)| ms.is_finite())
            .collect();
        figures.sort_by(|a, b| a.0.total_cmp(&b.0));
        let phrase = source_phrase(source);
        match figures.as_slice() {
            [] => {}
            [(ms, _)] => said.push(format!("{} {phrase}", duration_ms(*ms))),
            [(lo, lo_v), .., (hi, _)] => {
                said.push(format!("{} {phrase}", range_us(lo * 1e3, hi * 1e3)));
                quickest.push(lo_v.short_name());
            }
        }
    }
    if said.is_empty() {
        return None;
    }
    let lead = match (fastest, slowest) {
        (true, _) => "fastest cold /init: ",
        (false, true) => "slowest cold /init: ",
        (false, false) => "cold /init ",
    };
    let mut phrase = format!("{lead}{}", said.join(", "));
    if let Some(first) = quickest.first()
        && quickest.iter().all(|q| q == first)
    {
        let _ = write!(phrase, " (quickest with {first})");
    }
    Some(phrase)
}

fn memory_phrase(variants: &[&Variant], least: bool) -> Option<String> {
    let after_init = variants.iter().filter_map(|v| v.resident_after_init).min();
    let per_extra = variants
        .iter()
        .filter_map(|v| v.resident_per_extra_instance)
        .min();
    let said = match (after_init, per_extra) {
        (None, None) => return None,
        (Some(a), None) => format!("{} resident after /init", bytes(a)),
        (None, Some(e)) => format!("+{} per extra instance", bytes(e)),
        (Some(a), Some(e)) => format!(
            "{} resident after /init, +{} per extra instance",
            bytes(a),
            bytes(e)
        ),
    };
    Some(if least {
        format!("least memory: {said}")
    } else {
        said
    })
}

/// What a fresh instance per activation adds to the p50, against the persistent variant of
/// the same compiler.
fn fresh_phrase(variants: &[&Variant], low: usize) -> Option<String> {
    let p50 = |v: &Variant| {
        v.warm_at(low)
            .map(|w| w.p50.median)
            .filter(|x| x.is_finite())
    };
    let fresh: Vec<&Variant> = variants
        .iter()
        .copied()
        .filter(|v| v.lifetime == "fresh")
        .collect();
    let costs: Vec<String> = fresh
        .iter()
        .filter_map(|f| {
            let twin = variants
                .iter()
                .find(|v| v.lifetime == "persistent" && v.compiler == f.compiler)?;
            let cost = p50(f)? - p50(twin)?;
            let sign = if cost < 0.0 { "-" } else { "+" };
            let cost = format!("{sign}{}", duration_us(cost.abs()));
            Some(match &f.compiler {
                Some(compiler) if fresh.len() > 1 => format!("{cost} ({compiler})"),
                _ => cost,
            })
        })
        .collect();
    let first = costs.first()?;
    // One figure when the compilers agree: naming each would only repeat it.
    let same = |cost: &String| cost.split(" (").next() == first.split(" (").next();
    if costs.iter().all(same) {
        let cost = first.split(" (").next().unwrap_or(first);
        return Some(format!("fresh instances cost {cost}"));
    }
    Some(format!("fresh instances cost {}", costs.join(", ")))
}

/// A warning for each pair of variants of one lifetime whose p50s, at the lowest
/// connection count, overlap over the rounds: their order in the table is chance.
pub fn overlap_notes(c: &Comparison) -> Vec<String> {
    // Past a handful the warnings bury the table; the count says the rest.
    const SHOWN: usize = 6;
    let Some(&low) = c.connection_counts().first() else {
        return Vec::new();
    };
    let measured: Vec<(&Variant, Spread)> = c
        .variants
        .iter()
        .filter_map(|v| Some((v, v.warm_at(low)?.p50)))
        .filter(|(_, s)| s.min.is_finite() && s.max.is_finite())
        .collect();
    let mut pairs = Vec::new();
    for (i, (a, sa)) in measured.iter().enumerate() {
        for (b, sb) in &measured[i + 1..] {
            if a.lifetime == b.lifetime && sa.overlaps(sb) {
                pairs.push((*a, sa, *b, sb));
            }
        }
    }
    let advice = if c.conditions.pinned {
        "raise --hits to separate them"
    } else {
        "pin the run (taskset -c 0) and raise --hits to separate them"
    };
    let mut notes: Vec<String> = pairs
        .iter()
        .take(SHOWN)
        .map(|(a, sa, b, sb)| {
            let (size, unit) = time_unit(sa.max.max(sb.max));
            let span = |s: &Spread| format!("{}–{}", figure(s.min / size), figure(s.max / size));
            format!(
                "{} and {} overlap within their spread over rounds (p50 at {}: {} against \
                 {} {unit}): their order may change from run to run; {advice}.",
                a.label,
                b.label,
                connections_phrase(low),
                span(sa),
                span(sb)
            )
        })
        .collect();
    if pairs.len() > SHOWN {
        let more = pairs.len() - SHOWN;
        notes.push(format!(
            "{more} more pair{} of variants overlap the same way.",
            if more == 1 { "" } else { "s" }
        ));
    }
    notes
}

const CSV_COLUMNS: [&str; 25] = [
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
    "cold_start_ms",
    "rss_after_init_bytes",
    "rss_per_extra_instance_bytes",
    "crash_to_answer_ms",
    "errors",
];

/// The CSV's rows, also the HTML page's full table: one per variant and connection count,
/// and one with empty warm figures for a variant measured warm at no count, so no variant
/// goes missing.
fn full_rows(c: &Comparison) -> Vec<Vec<String>> {
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
                v.backend.clone(),
                v.compiler.clone().unwrap_or_default(),
                v.lifetime.clone(),
            ];
            match warm {
                Some(w) => row.extend([
                    w.connections.to_string(),
                    w.micros.len().to_string(),
                    number(w.p50.median, 1),
                    number(w.p50.min, 1),
                    number(w.p50.max, 1),
                    number(quantile(&w.micros, 0.9), 1),
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
            for source in SOURCES {
                row.push(
                    v.cold_from(source)
                        .map_or(String::new(), |c| number(c.millis.median, 3)),
                );
            }
            let count = |b: Option<u64>| b.map_or(String::new(), |b| b.to_string());
            row.push(count(v.resident_after_init));
            row.push(count(v.resident_per_extra_instance));
            row.push(
                v.crash_to_answer_ms
                    .map_or(String::new(), |s| number(s.median, 3)),
            );
            row.push(v.errors.to_string());
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
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for row in full_rows(c) {
        let fields: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Tableau's ten: told apart in print and by most colour-blind readers.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Fresh variants are dashed, so a variant and its fresh twin stay apart past ten colours.
fn dashes(v: &Variant) -> &'static str {
    if v.lifetime == "fresh" {
        " stroke-dasharray=\"7 4\""
    } else {
        ""
    }
}

const WIDTH: f64 = 1100.0;
/// A rough width of one character of the 13 px text, to lay legends out without a browser.
const CHAR: f64 = 7.0;

fn svg_open(out: &mut String, id: &str, title: &str, height: f64) {
    let title = escape(title);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{id}\" viewBox=\"0 0 {WIDTH} {height}\" \
         width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"{title}\">\
         <title>{title}</title><rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" \
         fill=\"#fff\"/><text class=\"title\" x=\"16\" y=\"26\">{title}</text>"
    );
}

fn text(out: &mut String, x: f64, y: f64, class: &str, anchor: &str, content: &str) {
    let _ = write!(
        out,
        "<text class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>",
        escape(content)
    );
}

/// `label` cut to about `room` characters: the chart keeps its shape, and the whole label
/// is in the element's tooltip and in the table.
fn fit(label: &str, room: f64) -> String {
    let room = room.max(4.0) as usize;
    if label.chars().count() <= room {
        return label.to_owned();
    }
    let mut cut: String = label.chars().take(room - 1).collect();
    cut.push('…');
    cut
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
    let _ = write!(
        out,
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {style}/>"
    );
}

/// A chart with nothing to draw still shows its title, and says so.
fn not_measured(id: &str, title: &str, why: &str) -> String {
    let mut out = String::new();
    svg_open(&mut out, id, title, 110.0);
    let _ = write!(
        out,
        "<rect x=\"16\" y=\"40\" width=\"{}\" height=\"56\" fill=\"#fafafa\" stroke=\"#ddd\"/>",
        WIDTH - 32.0
    );
    text(
        &mut out,
        WIDTH / 2.0,
        70.0,
        "none",
        "middle",
        "not measured",
    );
    text(&mut out, WIDTH / 2.0, 88.0, "note", "middle", why);
    out.push_str("</svg>");
    out
}

/// How a value maps onto an axis.
#[derive(Debug, Clone, Copy)]
enum Scale {
    Linear { lo: f64, hi: f64 },
    Log { lo: f64, hi: f64 },
}

/// A round step that cuts `range` into about `parts`.
fn nice_step(range: f64, parts: f64) -> f64 {
    let raw = (range / parts).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let leading = raw / magnitude;
    let nice = if leading <= 1.0 {
        1.0
    } else if leading <= 2.0 {
        2.0
    } else if leading <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

impl Scale {
    /// Bars start at zero on a linear scale; past ~30x between the smallest and the largest
    /// value the small bars would be slivers, so the scale turns logarithmic.
    fn for_bars(values: &[f64], log_allowed: bool) -> Scale {
        let positive: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = positive.iter().copied().fold(0.0, f64::max);
        if positive.is_empty() {
            return Scale::Linear { lo: 0.0, hi: 1.0 };
        }
        if log_allowed && hi / lo > 30.0 {
            return Scale::Log {
                lo: lo / 1.6,
                hi: hi * 1.3,
            };
        }
        let step = nice_step(hi, 5.0);
        Scale::Linear {
            lo: 0.0,
            hi: (hi * 1.04 / step).ceil() * step,
        }
    }

    fn log_around(values: impl Iterator<Item = f64>) -> Scale {
        let (lo, hi) = values
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if hi <= 0.0 {
            return Scale::Log { lo: 1.0, hi: 10.0 };
        }
        Scale::Log {
            lo: lo / 1.15,
            hi: (hi * 1.15).max(lo * 1.5),
        }
    }

    fn fraction(self, v: f64) -> f64 {
        let f = match self {
            Scale::Linear { lo, hi } => (v - lo) / (hi - lo),
            Scale::Log { lo, hi } => (v.max(lo).ln() - lo.ln()) / (hi.ln() - lo.ln()),
        };
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn ticks(self) -> Vec<f64> {
        let linear = |lo: f64, hi: f64| {
            let step = nice_step(hi - lo, 5.0);
            let mut ticks = Vec::new();
            let mut k = (lo / step).ceil();
            while k * step <= hi * (1.0 + 1e-9) {
                ticks.push(k * step);
                k += 1.0;
            }
            ticks
        };
        match self {
            Scale::Linear { lo, hi } => linear(lo, hi),
            Scale::Log { lo, hi } => {
                let first = lo.log10().floor() as i32;
                let last = hi.log10().ceil() as i32;
                // 1-2-5 reads best; decades alone when that crowds the axis, every
                // integer multiple when the range is too short for either.
                let sets: [&[f64]; 3] = [
                    &[1.0, 2.0, 5.0],
                    &[1.0],
                    &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
                ];
                for multiples in sets {
                    let ticks: Vec<f64> = (first..=last)
                        .flat_map(|e| multiples.iter().map(move |m| m * 10f64.powi(e)))
                        .filter(|t| *t >= lo && *t <= hi)
                        .collect();
                    if (3..=10).contains(&ticks.len()) {
                        return ticks;
                    }
                }
                // Less than a decade between the ends: round steps read better than
                // one lone power of ten.
                linear(lo, hi)
            }
        }
    }

    fn is_log(self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

/// The latency distribution at one connection count: percentile on a nines scale (each
/// tick ten times rarer than the last, so the tail gets as much room as the body) against
/// latency on a log scale.
fn latency_chart(c: &Comparison, connections: usize) -> String {
    let title = format!(
        "latency by percentile at {}",
        connections_phrase(connections)
    );
    let id = format!("latency-{connections}");
    let series: Vec<(usize, &Variant, &Warm)> = c
        .variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((i, v, v.warm_at(connections)?)))
        .filter(|(_, _, w)| !w.micros.is_empty())
        .collect();
    if series.is_empty() {
        return not_measured(
            &id,
            &title,
            "no variant was measured warm at this connection count",
        );
    }
    // Sample i of n sits at p = i/n: the first at 0, the largest at 1 - 1/n, the cap.
    let nines = |p: f64| -(1.0 - p).log10();
    let x_max = series
        .iter()
        .map(|(_, _, w)| (w.micros.len() as f64).log10())
        .fold(0.0, f64::max)
        .max(nines(0.9));
    let y = Scale::log_around(series.iter().flat_map(|(_, _, w)| w.micros.iter().copied()));

    let entry = 38.0;
    let (left, right, top) = (90.0, 790.0, 58.0);
    let bottom = f64::max(430.0, top + entry * series.len() as f64 + 10.0);
    let height = bottom + 62.0;
    let px = |x: f64| left + (right - left) * (x / x_max);
    let py = |v: f64| bottom - (bottom - top) * y.fraction(v);

    let mut out = String::new();
    svg_open(&mut out, &id, &title, height);
    for t in y.ticks() {
        line(&mut out, (left, py(t)), (right, py(t)), "class=\"grid\"");
        text(
            &mut out,
            left - 8.0,
            py(t) + 4.0,
            "tick",
            "end",
            &duration_us(t),
        );
    }
    let ticks = ["0", "50", "90", "99", "99.9", "99.99", "99.999", "99.9999"];
    for (t, label) in ticks
        .into_iter()
        .filter_map(|label| Some((label.parse::<f64>().ok()?, label)))
        .filter(|(t, _)| nines(t / 100.0) <= x_max + 1e-9)
    {
        let x = px(nines(t / 100.0));
        line(&mut out, (x, top), (x, bottom), "class=\"grid\"");
        line(&mut out, (x, bottom), (x, bottom + 5.0), "stroke=\"#777\"");
        text(&mut out, x, bottom + 19.0, "tick", "middle", label);
    }
    let _ = write!(
        out,
        "<rect class=\"frame\" x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\"/>",
        right - left,
        bottom - top
    );
    text(
        &mut out,
        (left + right) / 2.0,
        bottom + 44.0,
        "axis",
        "middle",
        "percentile (nines scale: 90, 99, 99.9 … evenly spaced, so the tail is readable)",
    );
    let mid = (top + bottom) / 2.0;
    let _ = write!(
        out,
        "<text class=\"axis\" x=\"22\" y=\"{mid:.1}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {mid:.1})\">latency (log scale)</text>"
    );

    for (i, v, w) in &series {
        let n = w.micros.len();
        let own_max = (n as f64).log10();
        // Enough points for a smooth line at this width; the samples they fall on are exact.
        let steps = 600;
        let mut points = String::new();
        let mut last = usize::MAX;
        for k in 0..=steps {
            let x = own_max * k as f64 / steps as f64;
            let index = ((n as f64) * (1.0 - 10f64.powf(-x))).floor() as usize;
            let index = index.min(n - 1);
            if index == last && k != steps {
                continue;
            }
            last = index;
            let _ = write!(points, "{:.1},{:.1} ", px(x), py(w.micros[index]));
        }
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\"{} \
             stroke-linejoin=\"round\" points=\"{}\"><title>{}</title></polyline>",
            colour(*i),
            dashes(v),
            points.trim_end(),
            escape(&v.label)
        );
    }

    // The legend, right of the plot, with each line's own figures under its name.
    let lx = right + 20.0;
    for (k, (i, v, w)) in series.iter().enumerate() {
        let ly = top + 12.0 + entry * k as f64;
        line(
            &mut out,
            (lx, ly - 4.0),
            (lx + 28.0, ly - 4.0),
            &format!("stroke=\"{}\" stroke-width=\"3\"{}", colour(*i), dashes(v)),
        );
        let room = (WIDTH - lx - 44.0) / CHAR;
        text(
            &mut out,
            lx + 36.0,
            ly,
            "label",
            "start",
            &fit(&v.label, room),
        );
        let figures = format!(
            "p50 {} · p99 {} · max {}",
            duration_us(w.p50.median),
            duration_us(w.p99.median),
            duration_us(w.micros[w.micros.len() - 1])
        );
        text(&mut out, lx + 36.0, ly + 16.0, "note", "start", &figures);
    }
    out.push_str("</svg>");
    out
}

/// One horizontal bar: a median, and the least–most whisker around it.
struct Bar {
    label: String,
    colour: &'static str,
    opacity: f64,
    median: f64,
    range: Option<(f64, f64)>,
}

/// Bars under one heading (a variant), or bars that name themselves.
struct Group {
    heading: Option<(String, &'static str)>,
    bars: Vec<Bar>,
}

/// A block of groups on one axis of its own.
struct Panel {
    heading: Option<String>,
    axis: String,
    format: fn(f64) -> String,
    log_allowed: bool,
    groups: Vec<Group>,
}

enum Key {
    Swatch(f64),
    Whisker,
}

const BAR_LEFT: f64 = 290.0;
const BAR_RIGHT: f64 = 950.0;

fn key_row(out: &mut String, y: f64, keys: &[(Key, String)]) -> f64 {
    let mut x = 16.0;
    let mut y = y;
    for (key, label) in keys {
        let width = 26.0 + label.chars().count() as f64 * CHAR + 22.0;
        if x + width > WIDTH - 16.0 {
            x = 16.0;
            y += 20.0;
        }
        match key {
            Key::Swatch(opacity) => {
                let _ = write!(
                    out,
                    "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"18\" height=\"12\" fill=\"#555\" \
                     fill-opacity=\"{opacity}\"/>",
                    y - 10.0
                );
            }
            Key::Whisker => {
                line(out, (x, y - 4.0), (x + 18.0, y - 4.0), "class=\"whisker\"");
                line(out, (x, y - 9.0), (x, y + 1.0), "class=\"whisker\"");
                line(
                    out,
                    (x + 18.0, y - 9.0),
                    (x + 18.0, y + 1.0),
                    "class=\"whisker\"",
                );
            }
        }
        text(out, x + 26.0, y, "key", "start", label);
        x += width;
    }
    y
}

fn bar_chart(id: &str, title: &str, keys: &[(Key, String)], panels: &[Panel]) -> String {
    let mut body = String::new();
    let mut y = key_row(&mut body, 52.0, keys) + 18.0;
    for panel in panels {
        if let Some(heading) = &panel.heading {
            y += 6.0;
            text(&mut body, 16.0, y + 12.0, "heading", "start", heading);
            y += 24.0;
        }
        let values: Vec<f64> = panel
            .groups
            .iter()
            .flat_map(|g| &g.bars)
            .flat_map(|b| {
                let (lo, hi) = b.range.unwrap_or((b.median, b.median));
                [b.median, lo, hi]
            })
            .collect();
        if panel.groups.iter().all(|g| g.bars.is_empty()) {
            text(
                &mut body,
                BAR_LEFT,
                y + 16.0,
                "none",
                "start",
                "not measured",
            );
            y += 34.0;
            continue;
        }
        let scale = Scale::for_bars(&values, panel.log_allowed);
        let px = |v: f64| BAR_LEFT + (BAR_RIGHT - BAR_LEFT) * scale.fraction(v);
        let plot_top = y;
        let mut rows = String::new();
        for group in panel.groups.iter().filter(|g| !g.bars.is_empty()) {
            if let Some((heading, colour)) = &group.heading {
                let _ = write!(
                    rows,
                    "<rect x=\"16\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>",
                    y + 4.0
                );
                // Bold runs wider than the 7 px the other labels are fitted with.
                let room = (BAR_LEFT - 44.0) / (CHAR * 1.1);
                text(
                    &mut rows,
                    34.0,
                    y + 15.0,
                    "label strong",
                    "start",
                    &fit(heading, room),
                );
                y += 22.0;
            }
            let heading = group.heading.as_ref().map(|(h, _)| h.as_str());
            for bar in &group.bars {
                y = draw_bar(&mut rows, y, heading, bar, panel.format, &px);
            }
            y += 8.0;
        }
        // The grid goes first: what is drawn later paints over it.
        for t in scale.ticks() {
            let x = px(t);
            line(&mut body, (x, plot_top), (x, y), "class=\"grid\"");
            let label = if t == 0.0 {
                "0".to_owned()
            } else {
                (panel.format)(t)
            };
            text(&mut body, x, y + 16.0, "tick", "middle", &label);
        }
        body.push_str(&rows);
        line(
            &mut body,
            (BAR_LEFT, plot_top),
            (BAR_LEFT, y),
            "stroke=\"#999\"",
        );
        line(&mut body, (BAR_LEFT, y), (BAR_RIGHT, y), "stroke=\"#999\"");
        let axis = if scale.is_log() {
            format!("{} (log scale)", panel.axis)
        } else {
            panel.axis.clone()
        };
        text(
            &mut body,
            (BAR_LEFT + BAR_RIGHT) / 2.0,
            y + 36.0,
            "axis",
            "middle",
            &axis,
        );
        y += 52.0;
    }
    let mut out = String::new();
    svg_open(&mut out, id, title, y + 8.0);
    out.push_str(&body);
    out.push_str("</svg>");
    out
}

/// One bar row at `y`, its label left of the axis and its median right of its end;
/// returns where the next row goes.
fn draw_bar(
    out: &mut String,
    y: f64,
    heading: Option<&str>,
    bar: &Bar,
    format: fn(f64) -> String,
    px: &dyn Fn(f64) -> f64,
) -> f64 {
    let mid = y + 10.0;
    let room = (BAR_LEFT - 26.0) / CHAR;
    text(
        out,
        BAR_LEFT - 10.0,
        mid + 4.0,
        "label",
        "end",
        &fit(&bar.label, room),
    );
    let width = (px(bar.median) - BAR_LEFT).max(0.0);
    // The tooltip names the variant too: hovered, a bar is seen without its heading.
    let named = match heading {
        Some(heading) => format!("{heading}, {}", bar.label),
        None => bar.label.clone(),
    };
    let tip = match bar.range {
        Some((lo, hi)) => format!(
            "{named}: {} ({}–{})",
            format(bar.median),
            format(lo),
            format(hi)
        ),
        None => format!("{named}: {}", format(bar.median)),
    };
    let _ = write!(
        out,
        "<g><title>{}</title><rect x=\"{BAR_LEFT}\" y=\"{:.1}\" width=\"{width:.1}\" \
         height=\"16\" fill=\"{}\" fill-opacity=\"{}\"/>",
        escape(&tip),
        mid - 8.0,
        bar.colour,
        bar.opacity
    );
    let mut end = BAR_LEFT + width;
    if let Some((lo, hi)) = bar.range {
        let (a, b) = (px(lo), px(hi));
        line(out, (a, mid), (b, mid), "class=\"whisker\"");
        line(out, (a, mid - 6.0), (a, mid + 6.0), "class=\"whisker\"");
        line(out, (b, mid - 6.0), (b, mid + 6.0), "class=\"whisker\"");
        end = end.max(b);
    }
    out.push_str("</g>");
    text(
        out,
        end + 8.0,
        mid + 4.0,
        "value",
        "start",
        &format(bar.median),
    );
    y + 24.0
}

fn spread_range(s: &Spread) -> Option<(f64, f64)> {
    (s.min.is_finite() && s.max.is_finite()).then_some((s.min, s.max))
}

/// Lighter shades for the ways of skipping the compiler, so a group's bars tell apart
/// without a colour of their own (the colour is the variant's).
fn source_opacity(source: &str) -> f64 {
    match source {
        "compiled" | "start" => 1.0,
        "cache" => 0.62,
        "signed" => 0.38,
        _ => 0.8,
    }
}

const COLD_TITLE: &str = "cold /init: a fresh server's first /init, by where the code came from";

fn cold_chart(c: &Comparison) -> String {
    let sources = c.sources();
    let groups: Vec<Group> = c
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.cold.is_empty())
        .map(|(i, v)| Group {
            heading: Some((v.label.clone(), colour(i))),
            bars: sources
                .iter()
                .filter_map(|s| v.cold_from(s))
                .map(|cold| Bar {
                    label: format!("{} ({} runs)", source_phrase(&cold.source), cold.runs),
                    colour: colour(i),
                    opacity: source_opacity(&cold.source),
                    median: cold.millis.median,
                    range: spread_range(&cold.millis),
                })
                .collect(),
        })
        .collect();
    if groups.is_empty() {
        return not_measured("cold", COLD_TITLE, "no fresh server was timed");
    }
    let mut keys: Vec<(Key, String)> = sources
        .iter()
        .map(|s| (Key::Swatch(source_opacity(s)), source_meaning(s).to_owned()))
        .collect();
    keys.push((
        Key::Whisker,
        "least–most over the fresh servers; bar: median".to_owned(),
    ));
    let panel = Panel {
        heading: None,
        axis: "time to answer /init".to_owned(),
        format: duration_ms,
        log_allowed: true,
        groups,
    };
    bar_chart("cold", COLD_TITLE, &keys, &[panel])
}

const MEMORY_TITLE: &str = "memory: resident after /init, and per extra instance";

fn memory_chart(c: &Comparison) -> String {
    let bars = |figure: fn(&Variant) -> Option<f64>| Group {
        heading: None,
        bars: c
            .variants
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                Some(Bar {
                    label: v.label.clone(),
                    colour: colour(i),
                    opacity: 1.0,
                    median: figure(v)?,
                    range: None,
                })
            })
            .collect(),
    };
    // In the unit shown, so that the axis steps are round in it.
    let after_init = bars(|v| Some(v.resident_after_init? as f64 / f64::from(1 << 20)));
    let per_extra = bars(|v| Some(v.resident_per_extra_instance? as f64 / 1024.0));
    if after_init.bars.is_empty() && per_extra.bars.is_empty() {
        return not_measured("memory", MEMORY_TITLE, "no server's resident set was read");
    }
    let mib = |v: f64| format!("{} MiB", figure(v));
    let kib = |v: f64| format!("{} KiB", figure(v));
    let panels = [
        Panel {
            heading: Some("resident set after /init (the server and its children)".to_owned()),
            axis: "resident memory".to_owned(),
            format: mib,
            log_allowed: false,
            groups: vec![after_init],
        },
        Panel {
            heading: Some("what each extra instance adds".to_owned()),
            axis: "resident memory per instance".to_owned(),
            format: kib,
            log_allowed: false,
            groups: vec![per_extra],
        },
    ];
    let keys = [(
        Key::Swatch(1.0),
        "bar: one reading, in the variant's colour".to_owned(),
    )];
    bar_chart("memory", MEMORY_TITLE, &keys, &panels)
}

const THROUGHPUT_TITLE: &str = "throughput: requests per second by connection count";

fn throughput_chart(c: &Comparison) -> String {
    let counts = c.connection_counts();
    // The most connections full, fewer lighter: the eye goes to the busiest load.
    let opacity = |k: usize| {
        if counts.len() < 2 {
            1.0
        } else {
            0.45 + 0.55 * k as f64 / (counts.len() - 1) as f64
        }
    };
    let groups: Vec<Group> = c
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.warm.is_empty())
        .map(|(i, v)| Group {
            heading: Some((v.label.clone(), colour(i))),
            bars: counts
                .iter()
                .enumerate()
                .filter_map(|(k, &n)| {
                    let w = v.warm_at(n)?;
                    Some(Bar {
                        label: connections_phrase(n),
                        colour: colour(i),
                        opacity: opacity(k),
                        median: w.per_second.median,
                        range: spread_range(&w.per_second),
                    })
                })
                .collect(),
        })
        .collect();
    if groups.iter().all(|g| g.bars.is_empty()) {
        return not_measured(
            "throughput",
            THROUGHPUT_TITLE,
            "no variant was measured warm",
        );
    }
    let mut keys: Vec<(Key, String)> = counts
        .iter()
        .enumerate()
        .map(|(k, &n)| (Key::Swatch(opacity(k)), connections_phrase(n)))
        .collect();
    keys.push((
        Key::Whisker,
        "least–most over the rounds; bar: median".to_owned(),
    ));
    let panel = Panel {
        heading: None,
        axis: "requests per second".to_owned(),
        format: |v| format!("{}/s", rate(v)),
        log_allowed: false,
        groups,
    };
    bar_chart("throughput", THROUGHPUT_TITLE, &keys, &[panel])
}

const CRASH_TITLE: &str = "recovery: from a crash to the next answer";

fn crash_chart(c: &Comparison) -> String {
    let bars: Vec<Bar> = c
        .variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let s = v.crash_to_answer_ms?;
            Some(Bar {
                label: v.label.clone(),
                colour: colour(i),
                opacity: 1.0,
                median: s.median,
                range: spread_range(&s),
            })
        })
        .collect();
    if bars.is_empty() {
        return not_measured("crash", CRASH_TITLE, "no variant was crashed on purpose");
    }
    let keys = [(
        Key::Whisker,
        "least–most over the crashes; bar: median".to_owned(),
    )];
    let panel = Panel {
        heading: None,
        axis: "time from the crash to the next good answer".to_owned(),
        format: duration_ms,
        log_allowed: true,
        groups: vec![Group {
            heading: None,
            bars,
        }],
    };
    bar_chart("crash", CRASH_TITLE, &keys, &[panel])
}

const PAGE_TITLE: &str = "wasmloop bench: which backend for this action";

const STYLE: &str = "\
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

fn conditions(out: &mut String, c: &Comparison) {
    let k = &c.conditions;
    let counts: Vec<String> = c
        .connection_counts()
        .iter()
        .map(ToString::to_string)
        .collect();
    let cpu = format!(
        "{}; {} CPU{} usable, {}",
        k.cpu_model,
        k.cpus,
        if k.cpus == 1 { "" } else { "s" },
        if k.pinned {
            "pinned with taskset"
        } else {
            "not pinned"
        }
    );
    let rows = [
        ("wasmloop", format!("{} (commit {})", k.version, k.commit)),
        ("CPU", cpu),
        (
            "connections",
            if counts.is_empty() {
                "none measured".to_owned()
            } else {
                listed(&counts)
            },
        ),
        (
            "requests",
            format!("{} per variant and connection count", k.hits),
        ),
        (
            "rounds",
            format!("{}, interleaved across the variants", k.rounds),
        ),
        (
            "concurrency",
            format!("{} (the servers' --concurrency)", k.concurrency),
        ),
        (
            "cold /init",
            format!("{} fresh servers per figure", k.cold_runs),
        ),
        ("date", k.date.clone()),
    ];
    out.push_str("<dl class=\"conditions\">");
    for (name, value) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&value));
    }
    let _ = write!(
        out,
        "<dt>/run body</dt><dd><code>{}</code></dd></dl>",
        escape(&k.body)
    );
}

/// One self-contained page: the conditions, verdicts, warnings, charts and every figure.
pub fn html(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{PAGE_TITLE}</title><style>{STYLE}</style></head><body>\n<h1>{PAGE_TITLE}</h1>\n"
    );
    out.push_str("<section><h2>Conditions</h2>");
    conditions(&mut out, c);
    out.push_str("</section>\n<section><h2>Verdicts</h2><ul class=\"verdicts\">");
    for verdict in verdicts(c) {
        match verdict.split_once(": ") {
            Some((backend, rest)) => {
                let _ = write!(
                    out,
                    "<li><strong>{}</strong>: {}</li>",
                    escape(backend),
                    escape(rest)
                );
            }
            None => {
                let _ = write!(out, "<li>{}</li>", escape(&verdict));
            }
        }
    }
    out.push_str("</ul></section>\n<section><h2>Warnings</h2>");
    let notes = all_notes(c);
    if notes.is_empty() {
        out.push_str("<p class=\"quiet\">None.</p>");
    } else {
        out.push_str("<ul class=\"notes\">");
        for note in notes {
            let _ = write!(
                out,
                "<li><span class=\"warn\">⚠ warning:</span>{}</li>",
                escape(bare(&note))
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>\n<section><h2>Charts</h2>\n");
    let mut charts: Vec<String> = c
        .connection_counts()
        .into_iter()
        .map(|n| latency_chart(c, n))
        .collect();
    if charts.is_empty() {
        charts.push(not_measured(
            "latency",
            "latency by percentile",
            "no variant was measured warm",
        ));
    }
    charts.extend([
        cold_chart(c),
        memory_chart(c),
        throughput_chart(c),
        crash_chart(c),
    ]);
    for chart in charts {
        let _ = writeln!(out, "<figure>{chart}</figure>");
    }
    out.push_str(
        "</section>\n<section><h2>All figures</h2><div class=\"scroll\"><table><thead><tr>",
    );
    for column in CSV_COLUMNS {
        let _ = write!(out, "<th>{}</th>", escape(column));
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
    out.push_str("</tbody></table></div>");
    for v in c.variants.iter().filter(|v| v.errors > 0) {
        let _ = write!(
            out,
            "<p class=\"wrong\"><strong>{}</strong>: {} answers were wrong; the first: \
             <code>{}</code></p>",
            escape(&v.label),
            v.errors,
            escape(v.first_wrong.as_deref().unwrap_or("not recorded"))
        );
    }
    out.push_str("</section>\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(median: f64, min: f64, max: f64) -> Spread {
        Spread { median, min, max }
    }

    /// `n` latencies from `base` µs up, the slowest percent climbing to 11x `base`.
    fn micros(base: f64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let f = i as f64 / n as f64;
                let tail = if f > 0.99 { (f - 0.99) * 1000.0 } else { 0.0 };
                base * (1.0 + 0.2 * f + tail)
            })
            .collect()
    }

    fn warm(connections: usize, base: f64, per_second: f64) -> Warm {
        Warm {
            connections,
            micros: micros(base, 2000),
            p50: spread(base * 1.1, base * 1.05, base * 1.15),
            p99: spread(base * 2.0, base * 1.8, base * 2.3),
            per_second: spread(per_second, per_second * 0.95, per_second * 1.04),
        }
    }

    fn cold(source: &str, ms: f64) -> Cold {
        Cold {
            source: source.to_owned(),
            millis: spread(ms, ms * 0.9, ms * 1.2),
            runs: 5,
        }
    }

    fn variant(backend: &str, compiler: Option<&str>, lifetime: &str, base: f64) -> Variant {
        Variant {
            warm: vec![warm(1, base, 1e6 / base), warm(8, base * 2.5, 3e6 / base)],
            ..Variant::named(backend, compiler, lifetime)
        }
    }

    /// Four variants: one with errors, one without cold figures, one whose label is markup.
    fn sample() -> Comparison {
        let mut module = variant("module", Some("cranelift"), "persistent", 30.0);
        module.cold = vec![
            cold("compiled", 21.0),
            cold("cache", 1.8),
            cold("signed", 4.0),
        ];
        module.resident_after_init = Some(12 << 20);
        module.resident_per_extra_instance = Some(300 << 10);
        module.crash_to_answer_ms = Some(spread(12.0, 10.0, 15.0));
        let fresh = variant("module", Some("cranelift"), "fresh", 55.0);
        let mut component = variant("component", Some("winch"), "persistent", 70.0);
        component.label = "component winch <b>persistent</b>".to_owned();
        component.cold = vec![cold("compiled", 1100.0), cold("cache", 15.0)];
        component.resident_after_init = Some(40 << 20);
        let mut native = variant("native", None, "persistent", 40.0);
        native.cold = vec![cold("start", 2.5)];
        native.resident_after_init = Some(3 << 20);
        native.errors = 3;
        native.first_wrong = Some("500 `oops`, expected 200 `{\"message\":\"Hi\"}`".to_owned());
        Comparison {
            conditions: Conditions {
                version: "0.1.0".to_owned(),
                commit: "abc1234".to_owned(),
                cpu_model: "Example CPU @ 3.0GHz".to_owned(),
                cpus: 2,
                pinned: false,
                date: "2025-01-02T03:04:05Z".to_owned(),
                hits: 2000,
                rounds: 10,
                concurrency: 4,
                body: "{\"value\":{\"name\":\"bench\"}}".to_owned(),
                cold_runs: 5,
            },
            variants: vec![module, fresh, component, native],
            notes: vec!["the machine was <busy>".to_owned()],
        }
    }

    #[test]
    fn the_page_holds_every_chart_the_conditions_and_the_verdicts_escaped() {
        let c = sample();
        let page = html(&c);
        let titles = [
            "latency by percentile at 1 connection",
            "latency by percentile at 8 connections",
            COLD_TITLE,
            MEMORY_TITLE,
            THROUGHPUT_TITLE,
            CRASH_TITLE,
        ];
        for title in titles {
            let chart = page
                .split("<svg")
                .skip(1)
                .find(|svg| svg.contains(&format!("<title>{}</title>", escape(title))));
            assert!(chart.is_some(), "no <svg titled {title:?}");
        }
        assert_eq!(page.matches("<svg").count(), titles.len());
        for v in &c.variants {
            assert!(page.contains(&escape(&v.label)), "no label {}", v.label);
        }
        for verdict in verdicts(&c) {
            let (backend, rest) = verdict.split_once(": ").expect("a backend first");
            let shown = format!("<li><strong>{backend}</strong>: {}</li>", escape(rest));
            assert!(page.contains(&shown), "no verdict {verdict}");
        }
        for shown in [
            "Example CPU @ 3.0GHz",
            "abc1234",
            "2025-01-02T03:04:05Z",
            "not pinned",
        ] {
            assert!(page.contains(shown), "no condition {shown}");
        }
        assert!(page.contains("{&quot;value&quot;:{&quot;name&quot;:&quot;bench&quot;}}"));
        assert!(!page.contains("<b>") && page.contains("&lt;b&gt;persistent&lt;/b&gt;"));
        assert!(page.contains("the machine was &lt;busy&gt;"), "the note");
        assert!(page.contains("3 answers were wrong; the first: <code>500 `oops`"));
        // Only the page's own markup opens a tag: every `<` starts a known element.
        for tag in page.split('<').skip(1) {
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '!')
                .collect();
            assert!(
                [
                    "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "h1", "h2",
                    "section", "dl", "dt", "dd", "code", "ul", "li", "span", "p", "figure", "svg",
                    "rect", "text", "line", "polyline", "g", "div", "table", "thead", "tbody",
                    "tr", "th", "td", "strong",
                ]
                .contains(&name.as_str()),
                "an unexpected <{name}"
            );
        }
    }

    #[test]
    fn a_chart_without_figures_says_not_measured() {
        let mut c = sample();
        for v in &mut c.variants {
            v.crash_to_answer_ms = None;
        }
        let page = html(&c);
        let crash = page
            .split("<svg")
            .find(|svg| svg.contains(CRASH_TITLE))
            .expect("the crash chart");
        assert!(crash.contains("not measured"), "{crash}");
        let latency = page
            .split("<svg")
            .find(|svg| svg.contains("at 1 connection"))
            .expect("the latency chart");
        assert!(!latency.contains("not measured"));
    }

    #[test]
    fn the_csv_has_a_header_and_a_line_per_variant_and_connection_count() {
        let mut c = sample();
        c.variants[0].label = "module, \"quoted\"".to_owned();
        let text = csv(&c);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 1 + 4 * 2, "{text}");
        assert!(
            lines[1]
                .starts_with("\"module, \"\"quoted\"\"\",module,cranelift,persistent,1,2000,33.0,"),
            "{}",
            lines[1]
        );
        assert!(lines[3].starts_with("module cranelift fresh,module,cranelift,fresh,1,"));
        let native = lines
            .iter()
            .find(|l| l.starts_with("native persistent,native,,persistent,8,"))
            .expect("native at 8");
        let fields: Vec<&str> = native.split(',').collect();
        assert_eq!(fields.len(), CSV_COLUMNS.len());
        assert_eq!(fields[20], "2.500", "cold_start_ms");
        assert_eq!(fields[21], (3u64 << 20).to_string());
        assert_eq!(fields[24], "3", "errors");
    }

    #[test]
    fn a_variant_measured_warm_at_no_count_keeps_its_csv_line() {
        let mut c = sample();
        c.variants[2].warm.clear();
        assert_eq!(csv(&c).lines().count(), 1 + 3 * 2 + 1);
    }

    #[test]
    fn the_verdicts_give_each_record_to_the_backend_that_holds_it() {
        let said = verdicts(&sample());
        assert_eq!(said.len(), 3, "{said:#?}");
        assert!(
            said[0].starts_with("module: fastest warm: p50 33 µs (persistent, cranelift)"),
            "{}",
            said[0]
        );
        assert!(
            said[0]
                .contains("fastest cold /init: 21 ms compiled, 1.8 ms from the cache, 4 ms signed"),
            "{}",
            said[0]
        );
        assert!(
            said[0].contains("fresh instances cost +28 µs"),
            "{}",
            said[0]
        );
        assert!(
            said[1].starts_with("component: warm p50 77 µs (persistent, winch)"),
            "{}",
            said[1]
        );
        assert!(
            said[1].contains("slowest cold /init: 1.1 s compiled"),
            "{}",
            said[1]
        );
        assert!(said[2].contains("least memory: 3 MiB"), "{}", said[2]);
        assert!(said[2].contains("3 wrong answers"), "{}", said[2]);
        let records = said.iter().filter(|s| s.contains("fastest warm")).count();
        assert_eq!(records, 1);

        let mut c = sample();
        c.variants[3].warm[0].p50 = spread(20.0, 19.0, 21.0);
        let said = verdicts(&c);
        assert!(
            said[2].starts_with("native: fastest warm: p50 20 µs (persistent)"),
            "{}",
            said[2]
        );
        assert!(!said[0].contains("fastest warm"));
    }

    #[test]
    fn overlapping_spreads_are_warned_of_and_disjoint_ones_not() {
        let mut c = sample();
        assert_eq!(
            overlap_notes(&c),
            Vec::<String>::new(),
            "the sample's spreads are apart"
        );
        c.variants[3].warm[0].p50 = spread(33.0, 31.0, 36.0);
        let notes = overlap_notes(&c);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("module cranelift persistent and native persistent overlap"),
            "{}",
            notes[0]
        );
        assert!(
            notes[0].contains("(p50 at 1 connection: 32–34 against 31–36 µs)"),
            "{}",
            notes[0]
        );
        assert!(notes[0].contains("taskset -c 0"));
        // The fresh variant overlaps too, but against another lifetime it is not compared.
        c.variants[1].warm[0].p50 = spread(33.0, 31.0, 36.0);
        assert_eq!(overlap_notes(&c).len(), 1);
        assert!(table(&c).contains(&notes[0]));
    }

    #[test]
    fn overlap_warnings_past_six_are_counted() {
        let mut c = sample();
        let v = c.variants[0].clone();
        c.variants = (0..5)
            .map(|i| Variant {
                label: format!("v{i}"),
                ..v.clone()
            })
            .collect();
        let notes = overlap_notes(&c);
        assert_eq!(notes.len(), 7, "{notes:#?}");
        assert_eq!(notes[6], "4 more pairs of variants overlap the same way.");
    }

    #[test]
    fn the_table_has_a_line_per_variant_then_verdicts_notes_and_wrong_answers() {
        let c = sample();
        let text = table(&c);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("variant") && lines[0].contains("p50@1 µs"),
            "{text}"
        );
        for (v, line) in c.variants.iter().zip(&lines[1..]) {
            assert!(line.starts_with(&v.label), "{text}");
        }
        assert!(lines[1].contains("33 [32–35]"), "{}", lines[1]);
        assert!(lines[4].ends_with("  3"), "native's errors: {}", lines[4]);
        assert!(text.contains("note: the machine was <busy>"));
        assert!(text.ends_with(
            "native persistent: 3 answers were wrong; the first: 500 `oops`, expected 200 \
             `{\"message\":\"Hi\"}`\n"
        ));
        let widest = lines.iter().take(5).map(|l| l.chars().count()).max();
        assert!(widest < Some(150), "{text}");
    }

    #[test]
    fn figures_read_in_the_unit_that_suits_them() {
        assert_eq!(duration_us(31.4), "31 µs");
        assert_eq!(duration_us(8.25), "8.2 µs");
        assert_eq!(duration_ms(1.8), "1.8 ms");
        assert_eq!(duration_ms(21.0), "21 ms");
        assert_eq!(duration_ms(1100.0), "1.1 s");
        assert_eq!(duration_us(999.7), "1 ms");
        assert_eq!(rate(32_104.0), "32k");
        assert_eq!(rate(9_091.0), "9.1k");
        assert_eq!(rate(850.0), "850");
        assert_eq!(bare("note: a VM\n"), "a VM");
        assert_eq!(bytes(300 << 10), "300 KiB");
        assert_eq!(listed(&[1, 4, 8]), "1, 4 and 8");
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.9), 4.0);
    }

    #[test]
    fn log_ticks_fall_inside_the_scale() {
        let usual = Scale::Log { lo: 8.0, hi: 300.0 };
        assert_eq!(usual.ticks(), vec![10.0, 20.0, 50.0, 100.0, 200.0]);
        let wide = Scale::Log {
            lo: 1.5,
            hi: 150_000.0,
        };
        assert_eq!(wide.ticks(), vec![10.0, 100.0, 1e3, 1e4, 1e5]);
        let narrow = Scale::Log { lo: 28.0, hi: 38.0 };
        assert!(narrow.ticks().len() >= 3, "{:?}", narrow.ticks());
        assert!(narrow.ticks().iter().all(|t| (28.0..=38.0).contains(t)));
    }
}
