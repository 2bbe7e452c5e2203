//! What the figures say: one verdict per question, and warnings where spreads overlap.

use super::*;

/// Who holds a record across the comparison. Each backend counts with its best variant,
/// and there is no record with fewer than two backends; when the best spread over rounds
/// overlaps another backend's, the order is chance, and the record is shared.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Record {
    Nobody,
    Held(Backend),
    /// Every backend whose best is within noise of the top one.
    Shared(Vec<Backend>),
}

/// Where one backend stands against a record.
pub(super) enum Standing {
    Holds,
    /// Level with these others, within noise.
    Level(Vec<Backend>),
    Not,
}

impl Record {
    pub(super) fn of(&self, backend: Backend) -> Standing {
        match self {
            Record::Held(b) if *b == backend => Standing::Holds,
            Record::Shared(all) if all.contains(&backend) => {
                Standing::Level(all.iter().copied().filter(|b| *b != backend).collect())
            }
            _ => Standing::Not,
        }
    }
}

impl Standing {
    /// `title` ("fastest warm") ahead of the figures: "fastest warm: ", "fastest warm
    /// with component, within noise: ", or `plain` when the record is another's.
    pub(super) fn lead(&self, title: &str, plain: &str) -> String {
        self.title(title)
            .map_or_else(|| plain.to_owned(), |title| format!("{title}: "))
    }

    /// `title` and whom the record is shared with ("fastest with component, within
    /// noise"); none when the record is another's.
    fn title(&self, title: &str) -> Option<String> {
        match self {
            Standing::Not => None,
            held => Some(format!("{title}{}", held.shared())),
        }
    }

    /// " with component and native, within noise" for a shared record; empty otherwise.
    fn shared(&self) -> String {
        match self {
            Standing::Level(others) => {
                let others: Vec<&str> = others.iter().map(|b| b.name()).collect();
                format!(" with {}, within noise", others.join(" and "))
            }
            Standing::Holds | Standing::Not => String::new(),
        }
    }
}

pub(super) fn holder(
    c: &Comparison,
    figure: impl Fn(&Variant) -> Option<Spread>,
    highest: bool,
) -> Record {
    let better = |a: f64, b: f64| if highest { a > b } else { a < b };
    let mut best: Vec<(Backend, Spread)> = Vec::new();
    for v in &c.variants {
        let Some(value) = figure(v).filter(|x| x.median.is_finite()) else {
            continue;
        };
        match best.iter_mut().find(|(b, _)| *b == v.backend) {
            Some(held) if better(value.median, held.1.median) => held.1 = value,
            Some(_) => {}
            None => best.push((v.backend, value)),
        }
    }
    if best.len() < 2 {
        return Record::Nobody;
    }
    let Some(&(top, top_spread)) = best
        .iter()
        .reduce(|a, b| if better(b.1.median, a.1.median) { b } else { a })
    else {
        return Record::Nobody;
    };
    let level: Vec<Backend> = best
        .iter()
        .filter(|(b, s)| *b == top || s.overlaps(&top_spread))
        .map(|(b, _)| *b)
        .collect();
    if level.len() > 1 {
        Record::Shared(level)
    } else {
        Record::Held(top)
    }
}

/// What the figures say of one backend, finding by finding; the table, the page and the
/// tests read the parts, and it reads as one sentence ("module: ...; ....").
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub backend: Backend,
    /// Empty when nothing was measured.
    pub findings: Vec<String>,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.findings.is_empty() {
            write!(f, "{}: nothing measured.", self.backend)
        } else {
            write!(f, "{}: {}.", self.backend, self.findings.join("; "))
        }
    }
}

/// One verdict per backend, in the order the backends first appear.
pub fn verdicts(c: &Comparison) -> Vec<Verdict> {
    let counts = c.connection_counts();
    let low = counts.first().copied();
    let high = counts.last().copied();
    let p50 = |v: &Variant| low.and_then(|n| v.warm_at(n)).map(|w| w.p50);
    let per_second = |v: &Variant| high.and_then(|n| v.warm_at(n)).map(|w| w.per_second);
    let tail = |v: &Variant| high.and_then(|n| v.warm_at(n)).map(|w| w.p99);
    // Measured once: a spread of one value.
    let resident = |v: &Variant| {
        v.resident_after_init
            .map(|b| crate::stats::spread(&[b as f64]))
    };

    // Fresh instances are the price of isolation, not a backend's speed: the record is
    // held with the lifetime `warm_phrase` reports.
    let fastest_warm = holder(
        c,
        |v| p50(v).filter(|_| v.lifetime != Lifetime::Fresh),
        false,
    );
    let most_per_second = holder(c, per_second, true);
    let shortest_tail = holder(
        c,
        |v| tail(v).filter(|_| v.lifetime != Lifetime::Fresh),
        false,
    );
    let least_memory = holder(c, resident, false);
    // A cold start is compared only with starts of its own kind: a compile with compiles,
    // a cached start with cached ones; a native process starting has no counterpart.
    let cold_records: Vec<(Source, Record)> = c
        .sources()
        .into_iter()
        .filter(|s| s.is_compared())
        .map(|s| (s, holder(c, |v| v.cold_from(s).map(|x| x.millis), false)))
        .collect();

    let mut out = Vec::new();
    for backend in c.backends() {
        let variants: Vec<&Variant> = c.variants.iter().filter(|v| v.backend == backend).collect();
        let mut parts = Vec::new();
        if let Some(low) = low {
            parts.extend(warm_phrase(&variants, low, fastest_warm.of(backend)));
        }
        let most = most_per_second.of(backend);
        if let (Some(high), false) = (high, matches!(most, Standing::Not)) {
            let best = variants
                .iter()
                .filter_map(|v| Some((*v, per_second(v)?.median)))
                .filter(|(_, x)| x.is_finite())
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((v, value)) = best {
                parts.push(format!(
                    "most req/s at {}{} ({} req/s, {})",
                    connections_phrase(high),
                    most.shared(),
                    rate(value),
                    v.flavour()
                ));
            }
        }
        if let Some(high) = high {
            parts.extend(tail_phrase(&variants, high, shortest_tail.of(backend)));
        }
        parts.extend(cold_phrase(c, &variants, |s| {
            cold_records
                .iter()
                .find(|(source, _)| *source == s)
                .map_or(Standing::Not, |(_, record)| record.of(backend))
        }));
        parts.extend(memory_phrase(&variants, least_memory.of(backend)));
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
        out.push(Verdict {
            backend,
            findings: parts,
        });
    }
    out
}

/// The variants with a finite `figure`, and it, in the lifetime a backend is usually run
/// in: the persistent ones when any was measured, else all.
fn as_usually_run<'a>(
    variants: &[&'a Variant],
    figure: impl Fn(&Variant) -> Option<f64>,
) -> Vec<(&'a Variant, f64)> {
    let measured: Vec<(&Variant, f64)> = variants
        .iter()
        .filter_map(|v| Some((*v, figure(v)?)))
        .filter(|(_, x)| x.is_finite())
        .collect();
    let persistent = measured
        .iter()
        .any(|(v, _)| v.lifetime == Lifetime::Persistent);
    measured
        .into_iter()
        .filter(|(v, _)| !persistent || v.lifetime == Lifetime::Persistent)
        .collect()
}

/// The backend's best p50 at the lowest connection count, in the lifetime it is usually
/// run in (persistent, when measured), and its other compilers beside it.
pub(super) fn warm_phrase(variants: &[&Variant], low: usize, fastest: Standing) -> Option<String> {
    let pool = as_usually_run(variants, |v| Some(v.warm_at(low)?.p50.median));
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
    Some(format!(
        "{}p50 {p50}{at} ({inside})",
        fastest.lead("fastest warm", "warm ")
    ))
}

/// The backend's tail at `high` connections: the best p99 of its persistent variants (any
/// variant's when none is persistent).
pub(super) fn tail_phrase(
    variants: &[&Variant],
    high: usize,
    shortest: Standing,
) -> Option<String> {
    let (v, p99) = as_usually_run(variants, |v| Some(v.warm_at(high)?.p99.median))
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(format!(
        "{}p99 {} at {} ({})",
        shortest.lead("shortest tail", "tail "),
        duration_us(p99),
        connections_phrase(high),
        v.flavour()
    ))
}

/// The backend's cold /inits, one figure (or range over its variants) per kind of start,
/// each named, and beside each the record `standing` gives it among the backends that
/// start that way.
pub(super) fn cold_phrase(
    c: &Comparison,
    variants: &[&Variant],
    standing: impl Fn(Source) -> Standing,
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
        let phrase = source.phrase();
        let record = standing(source)
            .title("fastest")
            .map(|title| format!(" ({title})"))
            .unwrap_or_default();
        match figures.as_slice() {
            [] => {}
            [(ms, _)] => said.push(format!("{} {phrase}{record}", duration_ms(*ms))),
            [(lo, lo_v), .., (hi, _)] => {
                said.push(format!("{} {phrase}{record}", range_us(lo * 1e3, hi * 1e3)));
                if source != Source::Receive {
                    quickest.push(lo_v.short_name());
                }
            }
        }
    }
    if said.is_empty() {
        return None;
    }
    let mut phrase = format!("cold /init {}", said.join(", "));
    if let Some(first) = quickest.first()
        && quickest.iter().all(|q| q == first)
    {
        let _ = write!(phrase, " (quickest with {first})");
    }
    Some(phrase)
}

/// The backend's best cold start of each kind, named: "21 ms compiled, 1.8 ms from the
/// cache, 4 ms signed", or "2.5 ms to start".
fn cold_figures(c: &Comparison, variants: &[&Variant]) -> Option<String> {
    let said: Vec<String> = c
        .sources()
        .into_iter()
        .filter(|s| *s != Source::Receive)
        .filter_map(|source| {
            let best = variants
                .iter()
                .filter_map(|v| v.cold_from(source).map(|x| x.millis.median))
                .filter(|x| x.is_finite())
                .reduce(f64::min)?;
            Some(format!("{} {}", duration_ms(best), source.phrase()))
        })
        .collect();
    (!said.is_empty()).then(|| format!("cold /init {}", said.join(", ")))
}

pub(super) fn memory_phrase(variants: &[&Variant], least: Standing) -> Option<String> {
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
    Some(format!("{}{said}", least.lead("least memory", "")))
}

/// What a fresh instance per activation adds to the p50, against the persistent variant of
/// the same compiler.
pub(super) fn fresh_phrase(variants: &[&Variant], low: usize) -> Option<String> {
    let p50 = |v: &Variant| {
        v.warm_at(low)
            .map(|w| w.p50)
            .filter(|s| s.median.is_finite())
    };
    let fresh: Vec<&Variant> = variants
        .iter()
        .copied()
        .filter(|v| v.lifetime == Lifetime::Fresh)
        .collect();
    let costs: Vec<String> = fresh
        .iter()
        .filter_map(|f| {
            let twin = variants
                .iter()
                .find(|v| v.lifetime == Lifetime::Persistent && v.compiler == f.compiler)?;
            let (spent, kept) = (p50(f)?, p50(twin)?);
            let cost = spent.median - kept.median;
            // A fresh instance cannot be cheaper than a kept one: a difference inside the
            // rounds' spread, or below zero, is noise, and said so, never a negative cost.
            let cost = if cost <= 0.0 || spent.overlaps(&kept) {
                "nothing measurable, within noise".to_owned()
            } else {
                format!("+{}", duration_us(cost))
            };
            Some(match f.compiler {
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

/// Warnings about the host the figures came from: busy when the run began, or its speed
/// moved between the run's start and its end past the spread of either reading.
pub fn host_notes(c: &Comparison) -> Vec<String> {
    let k = &c.conditions;
    let mut notes = Vec::new();
    if let Some(load) = k.before.load
        && k.online > 0
        && load >= k.online as f64 / 2.0
    {
        notes.push(format!(
            "the host was busy when the run began: its load average was {} on {} CPUs, so \
             other work shared the CPUs and the figures are slower and noisier than on an idle \
             host (a load left by work that just ended falls within a minute): rerun on an \
             idle host.",
            figure(load),
            k.online
        ));
    }
    if let (Some(before), Some(after)) = (k.before.reference_ms, k.after.reference_ms) {
        let ratio = after.median / before.median;
        if !before.overlaps(&after) && !(1.0 / MOVED..=MOVED).contains(&ratio) {
            let reading = |s: Spread| {
                format!(
                    "{} ms ({}–{})",
                    figure(s.median),
                    figure(s.min),
                    figure(s.max)
                )
            };
            notes.push(format!(
                "the host's speed moved during the run: a fixed CPU task took {} before it and \
                 {} after, so figures measured early and late in the run are not alike: rerun \
                 when the host is steady{}.",
                reading(before),
                reading(after),
                if k.pinned {
                    ""
                } else {
                    ", pinned (taskset -c 0)"
                }
            ));
        }
    }
    notes
}

/// How far apart (as a ratio) the host's speed before and after a run may be before the
/// page warns that it moved.
const MOVED: f64 = 1.1;

/// What a backend is, beyond its figures: what it isolates, what it may reach, with whose
/// privileges. The figures cannot show it, and it decides the choice as much as they do.
pub fn unmeasured(backend: Backend) -> &'static str {
    match backend {
        Backend::Module => {
            "sandboxed: its own capped memory, no network at all (WASI preview 1 has no \
             sockets), no files but a read-only /action; a crash is a trap the runtime \
             survives. Rust, C, Go"
        }
        Backend::Component => {
            "sandboxed like a module, and may reach the network only where the operator's \
             `wasmloop serve --allow-outbound` lists (nothing by default). Rust, Python, JavaScript"
        }
        Backend::Native => {
            "no sandbox: a process with the container's privileges, its files, its network \
             and every system call; only the container isolates it. Any executable"
        }
        Backend::Http => {
            "sandboxed like a component, the same file wasmtime serve and Spin run: each \
             activation a request as a web action's; Rust, Python, JavaScript"
        }
        Backend::WasmtimeServe => {
            "wasmtime's own server for the same HTTP component, as the peer: no OpenWhisk \
             protocol, the request itself"
        }
        Backend::Url => "a server run elsewhere: what it isolates is not known here",
        Backend::Row => "one of the rows' hellos",
    }
}

/// The page's and the terminal's first word on each backend: its main figures, then what
/// they do not show.
#[derive(Debug, Clone, PartialEq)]
pub struct BottomLine {
    pub backend: Backend,
    /// "warm p50 18 µs, 52,000 req/s at 8 connections, fresh instances cost +11 µs"; empty
    /// when nothing was measured.
    pub figures: String,
    pub unmeasured: &'static str,
}

impl std::fmt::Display for BottomLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.figures.is_empty() {
            true => write!(f, "{}: {}.", self.backend, self.unmeasured),
            false => write!(
                f,
                "{}: {}. {}.",
                self.backend, self.figures, self.unmeasured
            ),
        }
    }
}

pub fn bottom_lines(c: &Comparison) -> Vec<BottomLine> {
    let counts = c.connection_counts();
    let (low, high) = (counts.first().copied(), counts.last().copied());
    c.backends()
        .into_iter()
        .map(|backend| {
            let variants: Vec<&Variant> =
                c.variants.iter().filter(|v| v.backend == backend).collect();
            let mut figures = Vec::new();
            if let Some(low) = low {
                let best = variants
                    .iter()
                    .filter(|v| v.lifetime == Lifetime::Persistent)
                    .filter_map(|v| v.warm_at(low).map(|w| w.p50.median))
                    .filter(|x| x.is_finite())
                    .reduce(f64::min);
                if let Some(p50) = best {
                    figures.push(format!("warm p50 {}", duration_us(p50)));
                }
            }
            if let Some(high) = high {
                let per_second = variants
                    .iter()
                    .filter_map(|v| v.warm_at(high).map(|w| w.per_second.median))
                    .filter(|x| x.is_finite())
                    .reduce(f64::max)
                    .map(|x| format!("{} req/s", rate(x)));
                let tail = variants
                    .iter()
                    .filter(|v| v.lifetime == Lifetime::Persistent)
                    .filter_map(|v| v.warm_at(high).map(|w| w.p99.median))
                    .filter(|x| x.is_finite())
                    .reduce(f64::min)
                    .map(|x| format!("p99 {}", duration_us(x)));
                let said = match (per_second, tail) {
                    (Some(per_second), Some(tail)) => Some(format!("{per_second} with {tail}")),
                    (one, other) => one.or(other),
                };
                if let Some(said) = said {
                    figures.push(format!("{said} at {}", connections_phrase(high)));
                }
            }
            figures.extend(cold_figures(c, &variants));
            if let Some(low) = low {
                figures.extend(fresh_phrase(&variants, low));
            }
            BottomLine {
                backend,
                figures: figures.join(", "),
                unmeasured: unmeasured(backend),
            }
        })
        .collect()
}
