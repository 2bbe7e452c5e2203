//! What the figures say: one verdict per question, named only where the spreads are apart, and warnings where they overlap.

use super::*;

/// The fewest rounds (or cold runs) a spread may come from for a verdict to name a winner.
/// Two runs of one action, each `n` samples, give [least–most] ranges that miss each other
/// by chance 2 times in C(2n, n): 1 in 3 at two samples, 1 in 10 at three, 1 in 126 at five.
const FEWEST: usize = 5;

/// How far a single reading of memory is taken to move on its own, either way, relative:
/// read once per variant, it has no spread over rounds, and two identical servers read a
/// few pages apart (allocator arenas, pages touched lazily). Two readings must be more than
/// twice this apart for the smaller to hold a record.
const MEMORY_NOISE: f64 = 0.05;

impl Quantity {
    /// A median with its [least–most] beside it, every figure in the unit of the largest:
    /// "33 [32–35] µs", "21 [19–25] ms", "100k [95k–104k] req/s"; memory, read once, alone.
    fn spread(self, s: &Spread) -> String {
        self.spread_below(s, s.max.max(s.median))
    }

    /// The same, in the unit of figures up to `top`.
    fn spread_below(self, s: &Spread, top: f64) -> String {
        let (size, unit) = self.unit(top);
        let [median, min, max] = [s.median, s.min, s.max].map(|v| figure(v / size));
        match self {
            Quantity::Micros | Quantity::Millis => format!("{median} [{min}–{max}] {unit}"),
            Quantity::PerSecond => format!("{median}{unit} [{min}{unit}–{max}{unit}] req/s"),
            Quantity::Bytes => format!("{median} {unit}"),
        }
    }

    /// Whether `a` and `b` are told apart: their spreads share no value, and the gap between
    /// them survives the rounding they are printed with (20.4 against 20.6 µs reads "20" and
    /// "21" apart, but 20.6 against 20.7 reads "21" twice, and a reader sees no gap).
    fn apart(self, a: &Spread, b: &Spread) -> bool {
        let (lower, upper) = match (a.max < b.min, b.max < a.min) {
            (true, _) => (a, b),
            (_, true) => (b, a),
            _ => return false,
        };
        let (size, _) = self.unit(upper.max.max(lower.max));
        figure(lower.max / size) != figure(upper.min / size)
    }
}

/// Who holds a record across the comparison. There is no record with fewer than two
/// forms, or from spreads of too few rounds; where the best spread is not apart from
/// another form's, the order is chance, and the record is shared.
#[derive(Debug, Clone, PartialEq)]
enum Record {
    Nobody,
    Held(Form),
    /// Some forms, not all, whose spreads are within noise of the top one.
    Shared(Vec<Form>),
    /// Every form measured is within noise of the top one: there is no winner.
    Tied(Vec<Form>),
}

/// Where one form stands against a record.
enum Standing {
    Holds,
    /// Level with these others, within noise, ahead of the rest.
    Level(Vec<Form>),
    /// Within noise of these others, and nobody ahead.
    Tied(Vec<Form>),
    Not,
}

impl Record {
    fn of(&self, form: Form) -> Standing {
        let others = |all: &[Form]| all.iter().copied().filter(|f| *f != form).collect();
        match self {
            Record::Held(held) if *held == form => Standing::Holds,
            Record::Shared(all) if all.contains(&form) => Standing::Level(others(all)),
            Record::Tied(all) if all.contains(&form) => Standing::Tied(others(all)),
            _ => Standing::Not,
        }
    }
}

impl Standing {
    /// `title` ("fastest warm") ahead of the figures: "fastest warm: ", "fastest warm
    /// with component, within noise: ", "warm, within noise of component: " when nobody
    /// wins, or `plain` when the record is another's.
    fn lead(&self, title: &str, plain: &str) -> String {
        match self {
            Standing::Tied(others) => {
                let subject = plain.trim_end();
                let comma = if subject.is_empty() { "" } else { ", " };
                format!("{subject}{comma}within noise of {}: ", listed(others))
            }
            Standing::Not => plain.to_owned(),
            held => format!("{title}{}: ", held.shared()),
        }
    }

    /// What follows a figure: " (fastest)", " (fastest with component, within noise)",
    /// " (within noise of component)"; nothing when the record is another's.
    fn after(&self, title: &str) -> String {
        match self {
            Standing::Not => String::new(),
            Standing::Tied(others) => format!(" (within noise of {})", listed(others)),
            held => format!(" ({title}{})", held.shared()),
        }
    }

    /// " with component and native, within noise" for a shared record; empty otherwise.
    fn shared(&self) -> String {
        match self {
            Standing::Level(others) => format!(" with {}, within noise", listed(others)),
            _ => String::new(),
        }
    }
}

/// The record for `figure` (the best of each form, by median, `highest` or lowest),
/// told apart as `quantity` is said, from spreads of `samples` rounds or runs each. Every
/// variant counts against the top one: a form whose best median is behind, but one of
/// whose variants' spreads reaches the top one's, is level with it.
fn holder(
    c: &Comparison,
    figure: impl Fn(&Variant) -> Option<Spread>,
    highest: bool,
    quantity: Quantity,
    samples: usize,
) -> Record {
    let finite = |s: &Spread| s.median.is_finite() && s.min.is_finite() && s.max.is_finite();
    let measured = c.variants.iter().filter_map(|v| Some((v.form, figure(v)?)));
    let measured: Vec<(Form, Spread)> = measured.filter(|(_, s)| finite(s)).collect();
    let forms = distinct(measured.iter().map(|(form, _)| *form));
    let better = |a: &Spread, b: &Spread| a.median != b.median && (a.median > b.median) == highest;
    let top = measured
        .iter()
        .reduce(|a, b| if better(&b.1, &a.1) { b } else { a });
    let (Some(&(top, top_spread)), true) = (top, forms.len() >= 2 && samples >= FEWEST) else {
        return Record::Nobody;
    };
    let near = |form: &Form| {
        measured
            .iter()
            .any(|(f, s)| f == form && !quantity.apart(&top_spread, s))
    };
    let level: Vec<Form> = forms.into_iter().filter(|f| *f == top || near(f)).collect();
    match level.len() {
        1 => Record::Held(top),
        _ if measured.iter().all(|(f, _)| level.contains(f)) => Record::Tied(level),
        _ => Record::Shared(level),
    }
}

/// The rounds each warm spread comes from: as asked, but never more than the hits.
fn rounds(c: &Comparison) -> usize {
    c.conditions.rounds.min(c.conditions.hits)
}

/// A single reading of memory, widened by its own noise: a spread that two readings of
/// one server would share.
fn memory_spread(bytes: u64) -> Spread {
    let b = bytes as f64;
    Spread::new(b, b * (1.0 - MEMORY_NOISE), b * (1.0 + MEMORY_NOISE))
}

/// What the figures say of one form, finding by finding: a verdict ("module: ...; ....",
/// each finding with its spreads and the records it holds), or a bottom line ("module: ...,
/// .... " its main figures, then what they do not show). The table, the page and the tests
/// read the parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub form: Form,
    /// Empty when nothing was measured.
    pub findings: Vec<String>,
    /// A bottom line's: what the form is, beyond its figures (`unmeasured`).
    pub unmeasured: Option<&'static str>,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = self.form;
        match (self.findings.is_empty(), self.unmeasured) {
            (true, None) => write!(f, "{form}: nothing measured."),
            (false, None) => write!(f, "{form}: {}.", self.findings.join("; ")),
            (true, Some(unmeasured)) => write!(f, "{form}: {unmeasured}."),
            (false, Some(unmeasured)) => {
                write!(f, "{form}: {}. {unmeasured}.", self.findings.join(", "))
            }
        }
    }
}

/// A variant's warm figure at `connections`, if measured there.
fn warm(
    connections: Option<usize>,
    figure: fn(&Warm) -> Spread,
) -> impl Fn(&Variant) -> Option<Spread> {
    move |v| Some(figure(v.warm_at(connections?)?))
}

/// One verdict per form, in the order the forms first appear; with `bottom_line`, the
/// page's and the terminal's first word on each instead: its main figures, then what they
/// do not show. Both are said by the same phrases, a bottom line's brief.
pub fn verdicts(c: &Comparison, bottom_line: bool) -> Vec<Verdict> {
    let counts = c.connection_counts();
    let (low, high) = (counts.first().copied(), counts.last().copied());
    let p50 = warm(low, |w| w.p50);
    let per_second = warm(high, |w| w.per_second);
    let p99 = warm(high, |w| w.p99);
    let rounds = rounds(c);
    // Fresh instances are the price of isolation, not a form's speed: the record is
    // held with the lifetime `warm_phrase` reports.
    let kept = |figure: &dyn Fn(&Variant) -> Option<Spread>, v: &Variant| {
        figure(v).filter(|_| v.lifetime != Lifetime::Fresh)
    };
    let fastest_warm = holder(c, |v| kept(&p50, v), false, Quantity::Micros, rounds);
    let most_per_second = holder(c, &per_second, true, Quantity::PerSecond, rounds);
    let shortest_tail = holder(c, |v| kept(&p99, v), false, Quantity::Micros, rounds);
    // Memory has no rounds: its noise is in its spread.
    let resident = |v: &Variant| v.resident_after_init.map(memory_spread);
    let least_memory = holder(c, resident, false, Quantity::Bytes, FEWEST);
    // A cold start is compared only with starts of its own kind: a compile with compiles,
    // a cached start with cached ones; a native process starting has no counterpart.
    let cold_record = |s: Source| {
        let runs = c.variants.iter().filter_map(|v| Some(v.cold_from(s)?.runs));
        let figure = |v: &Variant| Some(v.cold_from(s)?.millis);
        let runs = runs.min().unwrap_or(0);
        (s, holder(c, figure, false, Quantity::Millis, runs))
    };
    let compared = c.sources().into_iter().filter(|s| s.is_compared());
    let cold_records: Vec<(Source, Record)> = compared.map(cold_record).collect();

    let mut out = Vec::new();
    for form in c.forms() {
        let variants: Vec<&Variant> = c.variants.iter().filter(|v| v.form == form).collect();
        let mut findings = Vec::new();
        if bottom_line {
            findings.extend(main_figures(&variants, low, high));
        } else {
            findings.extend(low.and_then(|low| warm_phrase(&variants, low, fastest_warm.of(form))));
            if let Some(high) = high {
                findings.extend(rate_phrase(&variants, high, most_per_second.of(form)));
                findings.extend(tail_phrase(&variants, high, shortest_tail.of(form)));
            }
        }
        // A bottom line names no record.
        let standing = |s: Source| {
            let record = cold_records.iter().find(|(r, _)| *r == s && !bottom_line);
            record.map_or(Standing::Not, |(_, record)| record.of(form))
        };
        findings.extend(cold_phrase(c, &variants, standing, bottom_line));
        if !bottom_line {
            findings.extend(memory_phrase(&variants, least_memory.of(form)));
        }
        findings.extend(low.and_then(|low| fresh_phrase(&variants, low, rounds, !bottom_line)));
        if !bottom_line {
            let crash = variants.iter().filter_map(|v| v.crash_to_answer_ms);
            let crash = crash.map(|s| s.median).filter(|x| x.is_finite());
            if let Some(ms) = crash.reduce(f64::min) {
                findings.push(format!("answers again {} after a crash", duration_ms(ms)));
            }
            let errors: usize = variants.iter().map(|v| v.errors).sum();
            if errors > 0 {
                let s = if errors == 1 { "" } else { "s" };
                findings.push(format!("{errors} wrong answer{s}"));
            }
        }
        let unmeasured = bottom_line.then(|| unmeasured(form));
        out.push(Verdict {
            form,
            findings,
            unmeasured,
        });
    }
    out
}

/// A bottom line's warm figures: the best p50 of the persistent variants at the lowest
/// connection count, then the best rate (of any variant) with the best persistent p99 at
/// the highest: "warm p50 18 µs, 52k req/s with p99 40 µs at 8 connections".
fn main_figures(variants: &[&Variant], low: Option<usize>, high: Option<usize>) -> Vec<String> {
    // The best median of a warm figure (the lowest, or the `highest`): of the persistent
    // variants alone, unless `any`.
    let median = |at: Option<usize>, figure: fn(&Warm) -> Spread, highest: bool, any: bool| {
        let kept = |v: &Variant| any || v.lifetime == Lifetime::Persistent;
        let figure = |v: &Variant| Some(figure(v.warm_at(at?)?)).filter(|_| kept(v));
        best(&pool(variants, figure, false), highest).map(|(_, s)| s.median)
    };
    let p50 = median(low, |w| w.p50, false, false).map(|x| format!("warm p50 {}", duration_us(x)));
    let per_second =
        median(high, |w| w.per_second, true, true).map(|x| format!("{} req/s", rate(x)));
    let tail = median(high, |w| w.p99, false, false).map(|x| format!("p99 {}", duration_us(x)));
    let busy = match (per_second, tail) {
        (Some(per_second), Some(tail)) => Some(format!("{per_second} with {tail}")),
        (one, other) => one.or(other),
    };
    let at = |(said, n): (String, usize)| format!("{said} at {}", connections_phrase(n));
    p50.into_iter().chain(busy.zip(high).map(at)).collect()
}

/// The variants with a finite `figure`, and it, in the lifetime a form is usually run
/// in: the persistent ones when any was measured, else all (`usual`), or all of them.
fn pool<'a>(
    variants: &[&'a Variant],
    figure: impl Fn(&Variant) -> Option<Spread>,
    usual: bool,
) -> Vec<(&'a Variant, Spread)> {
    let measured = variants.iter().filter_map(|v| Some((*v, figure(v)?)));
    let mut measured: Vec<_> = measured.filter(|(_, x)| x.median.is_finite()).collect();
    let persistent = |v: &Variant| v.lifetime == Lifetime::Persistent;
    let any_persistent = usual && measured.iter().any(|(v, _)| persistent(v));
    measured.retain(|(v, _)| !any_persistent || persistent(v));
    measured
}

/// The lowest (or, `highest`, the highest) median of `pool`.
fn best<'a>(pool: &[(&'a Variant, Spread)], highest: bool) -> Option<(&'a Variant, Spread)> {
    let order =
        |a: &&(&Variant, Spread), b: &&(&Variant, Spread)| a.1.median.total_cmp(&b.1.median);
    match highest {
        true => pool.iter().max_by(order).copied(),
        false => pool.iter().min_by(order).copied(),
    }
}

/// " at 8 connections", or nothing at one.
fn at(connections: usize) -> String {
    match connections {
        1 => String::new(),
        n => format!(" at {}", connections_phrase(n)),
    }
}

/// The form's best p50 at the lowest connection count, in the lifetime it is usually
/// run in (persistent, when measured), and its other compilers beside it, each with its
/// spread over rounds.
fn warm_phrase(variants: &[&Variant], low: usize, fastest: Standing) -> Option<String> {
    let pool = pool(variants, |v| Some(v.warm_at(low)?.p50), true);
    let (top, p50) = best(&pool, false)?;
    let others = pool.iter().filter(|(v, _)| v.label != top.label);
    let others: Vec<String> = others
        .map(|(v, s)| format!("{} {}", v.short_name(), Quantity::Micros.spread(s)))
        .collect();
    let mut inside = top.flavour();
    if !others.is_empty() {
        let _ = write!(inside, "; {}", others.join(", "));
    }
    let lead = fastest.lead("fastest warm", "warm ");
    let p50 = Quantity::Micros.spread(&p50);
    Some(format!("{lead}p50 {p50}{} ({inside})", at(low)))
}

/// The form's best rate at `high` connections, said only where it holds or shares the
/// record, or where nobody does.
fn rate_phrase(variants: &[&Variant], high: usize, most: Standing) -> Option<String> {
    let pool = pool(variants, |v| Some(v.warm_at(high)?.per_second), false);
    let (v, rate) = best(&pool, true).filter(|_| !matches!(most, Standing::Not))?;
    let connections = connections_phrase(high);
    let lead = match &most {
        Standing::Tied(others) => {
            format!("req/s at {connections}, within noise of {}", listed(others))
        }
        held => format!("most req/s at {connections}{}", held.shared()),
    };
    let (rate, flavour) = (Quantity::PerSecond.spread(&rate), v.flavour());
    Some(format!("{lead} ({rate}, {flavour})"))
}

/// The form's tail at `high` connections: the best p99 of its persistent variants (any
/// variant's when none is persistent), with its spread over rounds.
fn tail_phrase(variants: &[&Variant], high: usize, shortest: Standing) -> Option<String> {
    let pool = pool(variants, |v| Some(v.warm_at(high)?.p99), true);
    let (v, p99) = best(&pool, false)?;
    let lead = shortest.lead("shortest tail", "tail ");
    let p99 = Quantity::Micros.spread(&p99);
    let (connections, flavour) = (connections_phrase(high), v.flavour());
    Some(format!("{lead}p99 {p99} at {connections} ({flavour})"))
}

/// The form's cold starts, per kind of start its quickest variant's median with its
/// spread over the fresh servers, and beside each the record `standing` gives it among
/// the forms that start that way; then the compiler that was quickest at every kind,
/// where it was apart from the others each time. `brief`, a bottom line's: the medians
/// alone, of the starts only: "cold /init 21 ms compiled, 1.8 ms from the cache".
fn cold_phrase(
    c: &Comparison,
    variants: &[&Variant],
    standing: impl Fn(Source) -> Standing,
    brief: bool,
) -> Option<String> {
    let mut said = Vec::new();
    let mut quickest: Vec<Option<&str>> = Vec::new();
    let mut sources = c.sources();
    sources.retain(|s| !brief || *s != Source::Receive);
    for source in sources {
        let pool = pool(variants, |v| Some(v.cold_from(source)?.millis), false);
        let Some((top, ms)) = best(&pool, false) else {
            continue;
        };
        let ms_said = match brief {
            true => duration_ms(ms.median),
            false => Quantity::Millis.spread(&ms),
        };
        let after = standing(source).after("fastest");
        said.push(format!("{ms_said} {}{after}", source.said().phrase));
        if !brief && pool.len() > 1 && source != Source::Receive {
            let runs = pool.iter().filter_map(|(v, _)| v.cold_from(source));
            let runs = runs.map(|x| x.runs).min();
            let others = pool.iter().filter(|(v, _)| v.label != top.label);
            let apart =
                runs >= Some(FEWEST) && others.clone().all(|(_, s)| Quantity::Millis.apart(&ms, s));
            quickest.push(apart.then(|| top.short_name()));
        }
    }
    if said.is_empty() {
        return None;
    }
    let mut phrase = format!("{} {}", cold_words(c, variants), said.join(", "));
    if let Some(Some(first)) = quickest.first()
        && quickest.iter().all(|q| q == &Some(*first))
    {
        let _ = write!(phrase, " (quickest with {first})");
    }
    Some(phrase)
}

/// How a form's cold starts are named: "cold /init", or "cold start" for a server that
/// takes no /init (its action built in, or the peer's).
fn cold_words(c: &Comparison, variants: &[&Variant]) -> &'static str {
    let init = |s: &Source| !matches!(s, Source::FirstAnswer | Source::FirstCached);
    let started = |s: &Source| variants.iter().any(|v| v.cold_from(*s).is_some());
    let inits = c.sources().iter().any(|s| init(s) && started(s));
    if inits { "cold /init" } else { "cold start" }
}

fn memory_phrase(variants: &[&Variant], least: Standing) -> Option<String> {
    let least_of = |of: fn(&Variant) -> Option<u64>| variants.iter().filter_map(|v| of(v)).min();
    let after_init = least_of(|v| v.resident_after_init);
    let per_extra = least_of(|v| v.resident_per_extra_instance);
    let after_init = after_init.map(|a| format!("{} resident after /init", bytes(a)));
    let per_extra = per_extra.map(|e| format!("+{} per extra instance", bytes(e)));
    let said: Vec<String> = after_init.into_iter().chain(per_extra).collect();
    let lead = least.lead("least memory", "");
    (!said.is_empty()).then(|| format!("{lead}{}", said.join(", ")))
}

/// What a fresh instance per activation adds to the p50, against the persistent variant of
/// the same compiler, from spreads of `rounds` rounds; with `detail`, both p50s beside it
/// with their spreads, as a verdict compares them.
fn fresh_phrase(variants: &[&Variant], low: usize, rounds: usize, detail: bool) -> Option<String> {
    let p50 = |v: &Variant| Some(v.warm_at(low)?.p50).filter(|s| s.median.is_finite());
    let twin = |f: &Variant| {
        let kept = |v: &&&Variant| v.lifetime == Lifetime::Persistent && v.compiler == f.compiler;
        variants.iter().find(kept)
    };
    // Per compiler: the cost as said, and the two p50s it comes from.
    let fresh = variants.iter().filter(|v| v.lifetime == Lifetime::Fresh);
    let costs: Vec<(Option<Compiler>, String, String)> = fresh
        .filter_map(|f| {
            let (spent, kept) = (p50(f)?, p50(twin(f)?)?);
            let cost = duration_us(spent.median - kept.median);
            // A fresh instance cannot be cheaper than a kept one: a difference inside the
            // rounds' spread, or below zero, is noise, and said so, never a negative cost.
            let said = match spent.median > kept.median && Quantity::Micros.apart(&spent, &kept) {
                false => "nothing measurable, within noise".to_owned(),
                true if rounds < FEWEST => {
                    format!("+{cost} (from {rounds} rounds, too few to tell from noise)")
                }
                true => format!("+{cost}"),
            };
            let top = spent.max.max(kept.max);
            let [spent, kept] = [spent, kept].map(|s| Quantity::Micros.spread_below(&s, top));
            Some((f.compiler, said, format!("p50 {spent} against {kept}")))
        })
        .collect();
    let (_, first, _) = costs.first()?;
    let agree = costs.iter().all(|(_, said, _)| said == first);
    let many = costs.len() > 1;
    // Each compiler's figures named by it, where there are several.
    let named = |compiler: &Option<Compiler>, what: &str| match compiler {
        Some(compiler) if many => format!("{compiler}: {what}"),
        _ => what.to_owned(),
    };
    let said: Vec<String> = match (detail, agree) {
        // One cost, each compiler's p50s beside it.
        (true, true) if many => {
            let compared: Vec<String> = costs.iter().map(|(c, _, p50s)| named(c, p50s)).collect();
            vec![format!("{first} ({})", compared.join("; "))]
        }
        (true, _) => {
            let said =
                |(c, said, p50s): &(_, String, String)| format!("{said} ({})", named(c, p50s));
            costs.iter().map(said).collect()
        }
        // One figure when the compilers agree: naming each would only repeat it.
        (false, true) => vec![first.clone()],
        (false, false) => costs
            .iter()
            .map(|(c, said, _)| c.map_or(said.clone(), |c| format!("{said} ({c})")))
            .collect(),
    };
    Some(format!("fresh instances cost {}", said.join(", ")))
}

/// A warning for each pair of variants of one lifetime whose p50s, at the lowest
/// connection count, overlap over the rounds: their order in the table is chance.
pub fn overlap_notes(c: &Comparison) -> Vec<String> {
    // Past a handful the warnings bury the table; the count says the rest.
    const SHOWN: usize = 6;
    let Some(&low) = c.connection_counts().first() else {
        return Vec::new();
    };
    let finite = |(_, s): &(&Variant, Spread)| s.min.is_finite() && s.max.is_finite();
    let variants = c.variants.iter();
    let measured = variants.filter_map(|v| Some((v, v.warm_at(low)?.p50)));
    let measured: Vec<_> = measured.filter(finite).collect();
    let mut pairs = Vec::new();
    for (i, (a, sa)) in measured.iter().enumerate() {
        for (b, sb) in &measured[i + 1..] {
            if a.lifetime == b.lifetime && sa.overlaps(sb) {
                pairs.push((*a, sa, *b, sb));
            }
        }
    }
    let advice = match c.conditions.pinned {
        true => "raise --hits to separate them",
        false => "pin the run (taskset -c 0) and raise --hits to separate them",
    };
    let connections = connections_phrase(low);
    let note = |(a, sa, b, sb): &(&Variant, &Spread, &Variant, &Spread)| {
        let (size, unit) = time_unit(sa.max.max(sb.max));
        let span = |s: &Spread| format!("{}–{}", figure(s.min / size), figure(s.max / size));
        let (a, b, sa, sb) = (&a.label, &b.label, span(sa), span(sb));
        format!(
            "{a} and {b} overlap within their spread over rounds (p50 at {connections}: {sa} \
             against {sb} {unit}): their order may change from run to run; {advice}."
        )
    };
    let mut notes: Vec<String> = pairs.iter().take(SHOWN).map(note).collect();
    if let Some(more) = pairs.len().checked_sub(SHOWN).filter(|more| *more > 0) {
        let s = if more == 1 { "" } else { "s" };
        let more = format!("{more} more pair{s} of variants overlap the same way.");
        notes.push(more);
    }
    notes
}

/// Warnings about the host the figures came from: busy when the run began, or its speed
/// moved between the run's start and its end (`host_speed_note`).
pub fn host_notes(c: &Comparison) -> Vec<String> {
    let k = &c.conditions;
    let online = k.online;
    let busy = |load: &f64| online > 0 && *load >= online as f64 / 2.0;
    let busy = k.before.load.filter(busy);
    let busy = busy.map(figure).map(|load| {
        format!(
            "the host was busy when the run began: its load average was {load} on {online} CPUs, \
             so other work shared the CPUs and the figures are slower and noisier than on an \
             idle host (a load left by work that just ended falls within a minute): rerun on an \
             idle host."
        )
    });
    busy.into_iter().chain(host_speed_note(c)).collect()
}

/// The least a move of the host's speed is warned of at: the reference task's median
/// moves by a few percent between two readings of a quiet host.
const MOVED_LEAST: f64 = 0.05;
/// The most it may move unwarned, however wide the run's own spreads: past it, a figure
/// measured early in the run and one measured late differ by that much for the host alone.
const MOVED_MOST: f64 = 0.10;

/// The run's own spread: the widest [least–most] among the figures the verdicts compare
/// (each variant's p50, p99 and rate at every connection count, its cold starts), as a
/// fraction of its median. None when nothing was measured.
fn own_spread(c: &Comparison) -> Option<f64> {
    let warm = c.variants.iter().flat_map(|v| &v.warm);
    let warm = warm.flat_map(|w| [w.p50, w.p99, w.per_second]);
    let cold = c.variants.iter().flat_map(|v| &v.cold).map(|x| x.millis);
    let relative = warm.chain(cold).map(|s| (s.max - s.min) / s.median);
    relative.filter(|r| r.is_finite()).reduce(f64::max)
}

/// A warning when the host's speed moved during the run by more than the run's own spread:
/// the fixed CPU task's median before and after differ, relative to the quicker, by more
/// than the widest spread among the figures compared (bounded to 5–10%). The ratios
/// between variants measured in turns hold, but figures measured apart in time (the cold
/// starts before the warm rounds, one run against another) may differ by as much as the
/// host did, more than their spreads show. The medians are compared, not the readings'
/// ranges: a reading whose first runs were slow reaches into the other and hid a move
/// from 43 to 27 ms.
pub fn host_speed_note(c: &Comparison) -> Option<String> {
    let k = &c.conditions;
    let (before, after) = (k.before.reference_ms?, k.after.reference_ms?);
    let quicker = before.median.min(after.median);
    let moved = (before.median - after.median).abs() / quicker;
    let own = own_spread(c);
    let bound = own.map_or(MOVED_MOST, |own| own.clamp(MOVED_LEAST, MOVED_MOST));
    if quicker.is_nan() || quicker <= 0.0 || moved <= bound {
        return None;
    }
    let reading = |s: Spread| {
        let [median, min, max] = [s.median, s.min, s.max].map(figure);
        format!("{median} ms ({min}–{max})")
    };
    let percent = |f: f64| format!("{}%", figure(f * 100.0));
    let [least, most] = [MOVED_LEAST, MOVED_MOST].map(percent);
    let own = match own.map(|own| (own, percent(own))) {
        Some((own, _)) if own >= MOVED_MOST => format!(
            "more than {most}, past which figures measured early and late in the run differ by \
             more than the host's noise"
        ),
        Some((own, said)) if own <= MOVED_LEAST => format!(
            "more than {least} (the run's own spreads are narrower still, {said} at the widest)"
        ),
        Some((_, said)) => format!(
            "more than the run's own spread (its widest [least–most] is {said} of its median)"
        ),
        None => format!("more than {}", percent(bound)),
    };
    let pin = ["", ", pinned (taskset -c 0)"][usize::from(!k.pinned)];
    let (before, after, moved) = (reading(before), reading(after), percent(moved));
    Some(format!(
        "the host's speed moved during the run: a fixed CPU task took {before} before it and \
         {after} after, {moved} apart, {own}, so the figures may not compare with each other \
         (the cold starts, measured before the warm rounds, least of all): rerun on a quiet \
         machine{pin}."
    ))
}

/// A note for each kind of figure measured too few times for a verdict to name a winner:
/// the spreads of the same action would miss each other by chance too often.
pub fn few_samples_notes(c: &Comparison) -> Vec<String> {
    let said = |n: usize, of: &str, flag: &str, also: &str| {
        // C(2n, n) / 2: one time in this many, two runs of one action look apart.
        let ways = (0..n).fold(1.0, |ways, i| ways * (2 * n - i) as f64 / (i + 1) as f64);
        let chance = match ways / 2.0 {
            at_most_one if at_most_one <= 1.0 => "every time".to_owned(),
            one_in => format!("1 time in {}", figure(one_in)),
        };
        let (s, cold) = (if n == 1 { "" } else { "s" }, of.starts_with("fresh"));
        let figures = if cold { "cold starts" } else { "warm figures" };
        let winner = if cold { "cold" } else { "warm" };
        format!(
            "the {figures} come from {n} {of}{s} each, fewer than {FEWEST}: two runs of the same \
             action would look apart by chance {chance}, so no verdict names a {winner} winner: \
             give --{flag} {FEWEST} or more{also}."
        )
    };
    if c.forms().len() < 2 {
        return Vec::new();
    }
    let rounds = rounds(c);
    let warm = (rounds < FEWEST && !c.connection_counts().is_empty())
        .then(|| said(rounds, "round", "rounds", " (and --hits at least as many)"));
    let colds = c.variants.iter().flat_map(|v| &v.cold);
    let runs = colds.map(|x| x.runs).min().filter(|r| *r < FEWEST);
    let cold = runs.map(|runs| said(runs, "fresh server", "cold-runs", ""));
    warm.into_iter().chain(cold).collect()
}

/// What a form is, beyond its figures: what it isolates, what it may reach, with whose
/// privileges. The figures cannot show it, and it decides the choice as much as they do.
pub fn unmeasured(form: Form) -> &'static str {
    match (form.server, form.backend, form.protocol) {
        (Server::Url, ..) | (_, None, _) => {
            "a server run elsewhere: what it isolates is not known here"
        }
        (Server::WasmtimeServe, ..) => {
            "wasmtime's own server for the same HTTP component, as the peer: no OpenWhisk \
             protocol, the request itself"
        }
        (_, _, Protocol::Plain) => {
            "sandboxed like a component, the same file served as plain HTTP (`wasmloop serve --protocol http`): \
             the request itself on any path, as wasmtime serve gets it, no platform in front"
        }
        (_, Some(Backend::Module), _) => {
            "sandboxed: its own capped memory, no network at all (WASI preview 1 has no \
             sockets), no files but a read-only /action; a crash is a trap the runtime \
             survives. Rust, C, Go"
        }
        (_, Some(Backend::Component), _) => {
            "sandboxed like a module, and may reach the network only where the operator's \
             `wasmloop serve --allow-outbound` lists (nothing by default). Rust, Python, JavaScript"
        }
        (_, Some(Backend::Native), _) => {
            "no sandbox: a process with the container's privileges, its files, its network \
             and every system call; only the container isolates it. Any executable"
        }
        (_, Some(Backend::Http), _) => {
            "sandboxed like a component, the same file wasmtime serve and Spin run: each \
             activation a request as a web action's; Rust, Python, JavaScript"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{lines, same, say, spread, starts};
    use super::*;
    use Backend::{Component, Module, Native};
    use Lifetime::{Fresh, Persistent};

    /// A variant whose p50 at 1 connection, p99 and rate at 8 are `p50`, 3x and 20k over
    /// its p50, each with the spread `p50` has, relative.
    fn variant(backend: Backend, lifetime: Lifetime, p50: Spread) -> Variant {
        let scaled = |by: f64| spread(p50.median * by, p50.min * by, p50.max * by);
        let warm = |connections, p50: Spread, p99, per_second| Warm {
            connections,
            p50,
            p99,
            per_second,
            ..Warm::default()
        };
        // The rate is the inverse of the latency: its least is at the most.
        let per_second = spread(1e6 / p50.median, 1e6 / p50.max, 1e6 / p50.min);
        Variant {
            warm: vec![
                warm(1, p50, scaled(2.0), per_second),
                warm(8, scaled(2.0), scaled(3.0), per_second),
            ],
            cold: vec![Cold::new(Source::Compiled, scaled(1e3), FEWEST)],
            resident_after_init: Some(((p50.median as u64) << 20) / 10),
            ..Variant::named(backend, Some(Compiler::Cranelift), lifetime)
        }
    }

    fn comparison(variants: Vec<Variant>) -> Comparison {
        Comparison {
            conditions: Conditions {
                hits: 10_000,
                rounds: 10,
                cold_runs: FEWEST,
                ..Conditions::default()
            },
            variants,
            ..Comparison::default()
        }
    }

    /// A persistent module and component whose p50s are `module` and `component`.
    fn two_forms(module: Spread, component: Spread) -> Comparison {
        let module = variant(Module, Persistent, module);
        comparison(vec![module, variant(Component, Persistent, component)])
    }

    /// A module kept and fresh, whose p50s are `kept` and `fresh`.
    fn kept_and_fresh(kept: Spread, fresh: Spread) -> Comparison {
        let kept = variant(Module, Persistent, kept);
        comparison(vec![kept, variant(Module, Fresh, fresh)])
    }

    /// A winner's title as a verdict gives it alone: "fastest warm: ", "(fastest)", ...
    fn wins(said: &str) -> bool {
        let titles = "fastest warm:|most req/s at 8 connections (|shortest tail:|(fastest)|\
                      least memory:|(quickest with";
        titles.split('|').any(|title| said.contains(title))
    }

    #[test]
    fn spreads_apart_name_a_winner_and_overlapping_ones_never() {
        let apart = two_forms(spread(20.0, 19.0, 21.0), spread(30.0, 29.0, 31.0));
        let said = say(&apart);
        same(&lines(&said), golden!("apart-verdicts.txt"));
        assert!(!wins(&said[1]), "{}", said[1]);

        // The component's least reaches the module's most: nobody wins anything.
        let mut overlapping = two_forms(spread(20.0, 19.0, 24.0), spread(23.0, 21.0, 25.0));
        // Memory read once: 3% apart is within its noise.
        overlapping.variants[0].resident_after_init = Some(100 << 20);
        overlapping.variants[1].resident_after_init = Some(103 << 20);
        let said = say(&overlapping);
        assert!(!said.iter().any(|s| wins(s)), "{said:#?}");
        // Each record said within noise of the other: warm, compiled and memory.
        same(&lines(&said), golden!("overlapping-verdicts.txt"));
    }

    #[test]
    fn the_same_action_against_itself_never_gets_a_verdict() {
        for p50 in [
            spread(20.0, 19.0, 24.0),
            spread(20.0, 20.0, 20.0),
            spread(2000.0, 1990.0, 2010.0),
        ] {
            let mut twin = variant(Component, Persistent, p50);
            twin.resident_per_extra_instance = Some(300 << 10);
            let mut one = twin.clone();
            one.form = Form::ours(Module);
            let c = comparison(vec![one, twin]);
            for said in say(&c) {
                assert!(!wins(&said), "{said}");
            }
            let memory = |v: &Variant| v.resident_after_init.map(memory_spread);
            let (p50_at_1, rate_at_8) = (warm(Some(1), |w| w.p50), warm(Some(8), |w| w.per_second));
            for record in [
                holder(&c, p50_at_1, false, Quantity::Micros, 10),
                holder(&c, rate_at_8, true, Quantity::PerSecond, 10),
                holder(&c, memory, false, Quantity::Bytes, 10),
            ] {
                assert!(matches!(record, Record::Tied(_)), "{record:?}");
            }
        }
    }

    #[test]
    fn a_fresh_instance_against_a_kept_one_twice_as_slow_costs_what_it_costs() {
        let c = kept_and_fresh(spread(20.0, 19.0, 22.0), spread(40.0, 38.0, 44.0));
        same(&lines(&say(&c)), golden!("fresh-twice-verdicts.txt"));
        // The same action as its own fresh twin: nothing measurable.
        let c = kept_and_fresh(spread(20.0, 19.0, 22.0), spread(20.5, 19.0, 22.0));
        same(&lines(&say(&c)), golden!("fresh-alike-verdicts.txt"));
    }

    #[test]
    fn compilers_whose_fresh_instances_cost_alike_are_said_once() {
        let winch = |lifetime, p50| {
            let mut v = variant(Module, lifetime, p50);
            v.compiler = Some(Compiler::Winch);
            v
        };
        let c = comparison(vec![
            variant(Module, Persistent, spread(20.0, 19.0, 22.0)),
            variant(Module, Fresh, spread(20.5, 19.0, 22.0)),
            winch(Persistent, spread(21.0, 20.0, 23.0)),
            winch(Fresh, spread(21.0, 20.0, 23.0)),
        ]);
        same(&lines(&say(&c)), golden!("fresh-compilers-verdicts.txt"));
    }

    #[test]
    fn a_gap_the_printed_figures_do_not_show_is_no_gap() {
        // Apart as measured (20.6 against 20.65), but both read "21": no winner.
        let (a, b) = (spread(20.4, 20.1, 20.6), spread(20.8, 20.65, 20.9));
        assert!(!a.overlaps(&b));
        assert!(!Quantity::Micros.apart(&a, &b) && !Quantity::Micros.apart(&b, &a));
        // 20.4 against 20.6 reads "20" against "21".
        let c = spread(20.8, 20.6, 20.9);
        assert!(Quantity::Micros.apart(&spread(20.0, 19.8, 20.4), &c));
        // And as the issue saw it: a module at 20 against a component at 21 [21–21].
        let said = say(&two_forms(spread(20.4, 20.0, 20.6), b));
        assert!(!said[0].contains("fastest warm"), "{}", said[0]);
        starts(
            &said[0],
            "module: warm, within noise of component: p50 20 [20–21] µs",
        );
        // Bytes: read once, a reading within twice its noise of another is no record.
        let (small, large) = (memory_spread(100 << 20), memory_spread(109 << 20));
        assert!(!Quantity::Bytes.apart(&small, &large));
        assert!(Quantity::Bytes.apart(&small, &memory_spread(112 << 20)));
    }

    #[test]
    fn any_variant_within_noise_of_the_top_one_makes_its_backend_level() {
        // The component's best median is apart from the module's, but its other variant's
        // spread reaches the module's.
        let mut winch = variant(Component, Persistent, spread(25.0, 20.0, 30.0));
        winch.compiler = Some(Compiler::Winch);
        let c = comparison(vec![
            variant(Module, Persistent, spread(20.0, 19.0, 21.0)),
            variant(Component, Persistent, spread(24.0, 23.5, 24.5)),
            winch,
            variant(Native, Persistent, spread(90.0, 85.0, 95.0)),
        ]);
        let record = holder(&c, warm(Some(1), |w| w.p50), false, Quantity::Micros, 10);
        assert_eq!(
            record,
            Record::Shared(vec![Form::ours(Module), Form::ours(Component)])
        );
        starts(
            &say(&c)[0],
            "module: fastest warm with component, within noise:",
        );
    }

    #[test]
    fn too_few_rounds_or_cold_runs_name_no_winner_and_say_why() {
        let mut c = two_forms(spread(20.0, 19.5, 20.5), spread(30.0, 29.0, 31.0));
        assert_eq!(few_samples_notes(&c), Vec::<String>::new());
        c.conditions.rounds = 3;
        for v in &mut c.variants {
            v.cold[0].runs = 2;
        }
        let said = say(&c);
        starts(&said[0], "module: warm p50 20 [20–20] µs");
        assert!(said.iter().all(|s| !s.contains("fastest")), "{said:#?}");
        same(
            &lines(&few_samples_notes(&c)),
            golden!("few-samples-notes.txt"),
        );
        // Fewer hits than rounds: a round per hit.
        c.conditions.rounds = 10;
        c.conditions.hits = 4;
        assert!(few_samples_notes(&c)[0].contains("from 4 rounds"));
    }

    #[test]
    fn a_host_whose_speed_moved_past_the_runs_own_spread_is_warned_of() {
        let mut c = two_forms(spread(20.0, 19.8, 20.2), spread(30.0, 29.7, 30.3));
        // The run: 43 ms, its first runs of the task slow, then 27.
        c.conditions.before.reference_ms = Some(spread(43.0, 27.0, 45.0));
        c.conditions.after.reference_ms = Some(spread(27.0, 26.0, 28.0));
        let mut notes = vec![host_speed_note(&c).expect("a warning for 43 against 27 ms")];
        // The run's spreads are 2% wide: a 7% move is past them (and past the floor, 5%).
        c.conditions.before.reference_ms = Some(spread(21.0, 20.8, 21.2));
        c.conditions.after.reference_ms = Some(spread(22.5, 22.3, 22.7));
        notes.push(host_speed_note(&c).expect("a warning for a 7% move"));
        // A 4% move is within the floor.
        c.conditions.after.reference_ms = Some(spread(21.8, 21.7, 22.0));
        assert_eq!(host_speed_note(&c), None);
        // With spreads 30% wide, a 7% move is within them, and 12% is past the most.
        for v in &mut c.variants {
            v.warm[0].p50 = spread(20.0, 17.0, 23.0);
        }
        c.conditions.after.reference_ms = Some(spread(22.5, 22.3, 22.7));
        assert_eq!(host_speed_note(&c), None);
        c.conditions.after.reference_ms = Some(spread(23.6, 23.4, 23.8));
        notes.push(host_speed_note(&c).expect("a warning for a 12% move"));
        same(&lines(&notes), golden!("host-speed-notes.txt"));
        // And the table says it as a warning.
        assert!(table(&c).contains("\nwarning: the host's speed moved during the run"));
    }
}
