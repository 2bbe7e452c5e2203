//! The page's charts, drawn as inline SVG: latency curves, and bars with their spread.

use super::*;

/// Tableau's ten: told apart in print and by most colour-blind readers.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

const WIDTH: f64 = 1100.0;
/// A rough width of one character of the 13 px text, to lay legends out without a browser.
const CHAR: f64 = 7.0;
/// Where the bars start and their longest ends.
const BAR_LEFT: f64 = 290.0;
const BAR_RIGHT: f64 = 950.0;

pub(super) const COLD_TITLE: &str =
    "cold start: a fresh server's first /init (or first answer), by where the code came from";
pub(super) const MEMORY_TITLE: &str = "memory: resident after /init, and per extra instance";
pub(super) const THROUGHPUT_TITLE: &str = "throughput: requests per second by connection count";
pub(super) const CRASH_TITLE: &str = "recovery: from a crash to the next answer";

/// A chart's elements, in the order they are painted.
#[derive(Default)]
struct Svg(String);

impl Svg {
    /// `content` at `at`, its class ("tick") and anchor ("end") said in one ("tick end").
    fn text(&mut self, (x, y): (f64, f64), class_anchor: &str, content: &str) {
        let split = class_anchor.rsplit_once(' ');
        let (class, anchor) = split.unwrap_or((class_anchor, "start"));
        let at = format!("class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\"");
        let _ = write!(self.0, "<text {at}>{}</text>", escape(content));
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let at = format!("x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\"");
        let _ = write!(self.0, "<line {at} {style}/>");
    }

    fn rect(&mut self, (x, y): (f64, f64), (width, height): (f64, f64), style: &str) {
        let at = format!("x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{height}\"");
        let _ = write!(self.0, "<rect {at} {style}/>");
    }

    /// A least–most whisker from `a` to `b` at height `y`, its ends `reach` up and down.
    fn whisker(&mut self, a: f64, b: f64, y: f64, reach: f64) {
        self.line((a, y), (b, y), "class=\"whisker\"");
        self.line((a, y - reach), (a, y + reach), "class=\"whisker\"");
        self.line((b, y - reach), (b, y + reach), "class=\"whisker\"");
    }

    /// The whole chart: a white page `height` high, its title (also its name for screen
    /// readers and its tooltip), then what was drawn.
    fn finish(self, id: &str, title: &str, height: f64) -> String {
        let title = escape(title);
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{id}\" viewBox=\"0 0 {WIDTH} \
             {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" \
             aria-label=\"{title}\"><title>{title}</title><rect x=\"0\" y=\"0\" \
             width=\"{WIDTH}\" height=\"{height}\" fill=\"#fff\"/><text class=\"title\" \
             x=\"16\" y=\"26\">{title}</text>{}</svg>",
            self.0
        )
    }
}

/// `label` cut to about `room` characters: the chart keeps its shape, and the whole label
/// is in the element's tooltip and in the table.
fn fit(label: &str, room: f64) -> String {
    let room = room.max(4.0) as usize;
    match label.char_indices().nth(room) {
        Some(_) => label.chars().take(room - 1).chain(['…']).collect(),
        None => label.to_owned(),
    }
}

/// A chart with nothing to draw still shows its title, and says so.
pub(super) fn not_measured(id: &str, title: &str, why: &str) -> String {
    let mut svg = Svg::default();
    let mid = WIDTH / 2.0;
    let style = "fill=\"#fafafa\" stroke=\"#ddd\"";
    svg.rect((16.0, 40.0), (WIDTH - 32.0, 56.0), style);
    svg.text((mid, 70.0), "none middle", "not measured");
    svg.text((mid, 88.0), "note middle", why);
    svg.finish(id, title, 110.0)
}

/// How a value maps onto an axis: from `lo` to `hi`, logarithmically or not.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
}

/// A round step that cuts `range` into about five.
fn nice_step(range: f64) -> f64 {
    let raw = (range / 5.0).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let nice = [1.0, 2.0, 5.0].into_iter().find(|n| raw / magnitude <= *n);
    nice.unwrap_or(10.0) * magnitude
}

impl Scale {
    pub(super) fn new(lo: f64, hi: f64, log: bool) -> Scale {
        Scale { lo, hi, log }
    }

    /// Over the positive figures of `values`: bars start at zero on a linear scale, but
    /// past ~30x between the smallest and the largest the small bars would be slivers, so
    /// the scale turns logarithmic where `log` allows; a curve's is logarithmic, around
    /// its figures.
    fn over(values: impl Iterator<Item = f64>, bars: bool, log: bool) -> Scale {
        let positive = values.filter(|v| v.is_finite() && *v > 0.0);
        let extent = positive.fold(None, |e: Option<(f64, f64)>, v| {
            Some(e.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        });
        match extent {
            None if bars => Scale::new(0.0, 1.0, false),
            None => Scale::new(1.0, 10.0, true),
            Some((lo, hi)) if !bars => Scale::new(lo / 1.15, (hi * 1.15).max(lo * 1.5), true),
            Some((lo, hi)) if log && hi / lo > 30.0 => Scale::new(lo / 1.6, hi * 1.3, true),
            Some((_, hi)) => {
                let step = nice_step(hi);
                Scale::new(0.0, (hi * 1.04 / step).ceil() * step, false)
            }
        }
    }

    fn fraction(self, v: f64) -> f64 {
        let Scale { lo, hi, log } = self;
        let f = match log {
            false => (v - lo) / (hi - lo),
            true => (v.max(lo).ln() - lo.ln()) / (hi.ln() - lo.ln()),
        };
        let f = Some(f).filter(|f| f.is_finite());
        f.map_or(0.0, |f| f.clamp(0.0, 1.0))
    }

    pub(super) fn ticks(self) -> Vec<f64> {
        let Scale { lo, hi, log } = self;
        let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        // 1-2-5 reads best; decades alone when that crowds the axis, every integer
        // multiple when the range is too short for either.
        let every: Vec<f64> = (1..10).map(f64::from).collect();
        let sets = [&[1.0, 2.0, 5.0][..], &[1.0], &every];
        for multiples in sets.iter().filter(|_| log) {
            let ticks: Vec<f64> = (first..=last)
                .flat_map(|e| multiples.iter().map(move |m| m * 10f64.powi(e)))
                .filter(|t| *t >= lo && *t <= hi)
                .collect();
            if (3..=10).contains(&ticks.len()) {
                return ticks;
            }
        }
        // Linear, or less than a decade between the ends: round steps read better than one
        // lone power of ten.
        let step = nice_step(hi - lo);
        let first = (lo / step).ceil();
        let ticks = (0..).map(|k| (first + f64::from(k)) * step);
        ticks.take_while(|t| *t <= hi * (1.0 + 1e-9)).collect()
    }
}

/// `bench --out`'s latency.svg: the rows' latency curves at their one connection count,
/// drawn as the report draws them; on its own, the chart carries the page's styles (its
/// grid, ticks and labels are classes of them).
pub fn latency_svg(rows: &Comparison) -> String {
    let connections = rows.connection_counts().first().copied().unwrap_or(1);
    latency_chart(rows, connections, Some(super::html::STYLE))
}

/// The latency distribution at one connection count: a curve per variant measured there,
/// percentile on a nines scale (each tick ten times rarer than the last, so the tail gets
/// as much room as the body) against latency on a log scale, each curve in its variant's
/// colour; `css`, the styles a chart outside the page carries.
pub(super) fn latency_chart(c: &Comparison, connections: usize, css: Option<&str>) -> String {
    let at = connections_phrase(connections);
    let title = format!("latency by percentile at {at}");
    let id = format!("latency-{connections}");
    let series = c.variants.iter().enumerate();
    let series = series.filter_map(|(i, v)| Some((i, v, v.warm_at(connections)?)));
    let series: Vec<_> = series.filter(|(.., w)| !w.micros.is_empty()).collect();
    if series.is_empty() {
        let why = "no variant was measured warm at this connection count";
        return not_measured(&id, &title, why);
    }
    // Sample i of n sits at p = i/n: the first at 0, the largest at 1 - 1/n, the cap.
    let nines = |p: f64| -(1.0 - p).log10();
    let lengths = series.iter().map(|(.., w)| w.micros.len() as f64);
    let x_max = lengths.map(f64::log10).fold(nines(0.9), f64::max);
    let micros = series.iter().flat_map(|(.., w)| w.micros.iter());
    let y = Scale::over(micros.copied(), false, true);
    let (entry, left, right, top) = (38.0, 90.0, 790.0, 58.0);
    let bottom = f64::max(430.0, top + entry * series.len() as f64 + 10.0);
    let px = |x: f64| left + (right - left) * (x / x_max);
    let py = |v: f64| bottom - (bottom - top) * y.fraction(v);

    let mut svg = Svg(css.map_or(String::new(), |css| format!("<style>{css}</style>")));
    for t in y.ticks() {
        svg.line((left, py(t)), (right, py(t)), "class=\"grid\"");
        svg.text((left - 8.0, py(t) + 4.0), "tick end", &duration_us(t));
    }
    for label in ["0", "50", "90", "99", "99.9", "99.99", "99.999", "99.9999"] {
        let x = nines(label.parse::<f64>().unwrap_or(0.0) / 100.0);
        if x <= x_max + 1e-9 {
            let x = px(x);
            svg.line((x, top), (x, bottom), "class=\"grid\"");
            svg.line((x, bottom), (x, bottom + 5.0), "stroke=\"#777\"");
            svg.text((x, bottom + 19.0), "tick middle", label);
        }
    }
    svg.rect((left, top), (right - left, bottom - top), "class=\"frame\"");
    let axis = "percentile (nines scale: 90, 99, 99.9 … evenly spaced, so the tail is readable)";
    svg.text(((left + right) / 2.0, bottom + 44.0), "axis middle", axis);
    let mid = (top + bottom) / 2.0;
    let turn = format!("transform=\"rotate(-90 22 {mid:.1})\"");
    let axis = format!("class=\"axis\" x=\"22\" y=\"{mid:.1}\" text-anchor=\"middle\"");
    let _ = write!(svg.0, "<text {axis} {turn}>latency (log scale)</text>");
    // Fresh variants are dashed, so a variant and its fresh twin stay apart past ten colours.
    let stroke = |i: usize, v: &Variant, width: &str| {
        let dashes = ["", " stroke-dasharray=\"7 4\""][usize::from(v.lifetime == Lifetime::Fresh)];
        format!("stroke=\"{}\" stroke-width=\"{width}\"{dashes}", colour(i))
    };
    for &(i, v, w) in &series {
        let (micros, n) = (&w.micros, w.micros.len() as f64);
        // Enough points for a smooth line at this width; the samples they fall on are exact.
        let mut points = String::new();
        let mut last = usize::MAX;
        for k in 0..=600 {
            let x = n.log10() * f64::from(k) / 600.0;
            let index = ((n * (1.0 - 10f64.powf(-x))).floor() as usize).min(micros.len() - 1);
            if index != last || k == 600 {
                last = index;
                let _ = write!(points, "{:.1},{:.1} ", px(x), py(micros[index]));
            }
        }
        let style = stroke(i, v, "2.2");
        let (points, label) = (points.trim_end(), escape(&v.label));
        let line = format!("fill=\"none\" {style} stroke-linejoin=\"round\"");
        let _ = write!(svg.0, "<polyline {line} points=\"{points}\">");
        let _ = write!(svg.0, "<title>{label}</title></polyline>");
    }
    // The legend, right of the plot, with each line's own figures under its name.
    let lx = right + 20.0;
    for (k, &(i, v, w)) in series.iter().enumerate() {
        let ly = top + 12.0 + entry * k as f64;
        let style = stroke(i, v, "3");
        svg.line((lx, ly - 4.0), (lx + 28.0, ly - 4.0), &style);
        let label = fit(&v.label, (WIDTH - lx - 44.0) / CHAR);
        svg.text((lx + 36.0, ly), "label start", &label);
        let (p50, p99, max) = (w.p50.median, w.p99.median, w.micros[w.micros.len() - 1]);
        let figures = [("p50", p50), ("p99", p99), ("max", max)];
        let figures = figures.map(|(name, v)| format!("{name} {}", duration_us(v)));
        svg.text((lx + 36.0, ly + 16.0), "note start", &figures.join(" · "));
    }
    svg.finish(&id, &title, bottom + 62.0)
}

/// One horizontal bar, its label, colour and shade: a median, and the least–most
/// whisker around it where those are known.
struct Bar(String, &'static str, f64, Spread);

/// Bars under one heading (a variant, in its colour), or bars that name themselves.
type Group = (Option<(String, &'static str)>, Vec<Bar>);

/// A block of groups on an axis of its own: its heading, the axis's name, how its figures
/// read, whether its scale may turn logarithmic, and its groups.
type Panel = (Option<&'static str>, &'static str, Format, bool, Vec<Group>);

/// How a panel's figures read.
type Format = fn(f64) -> String;

/// A legend's entry: a shade of the bars (`Some`), or the whisker, and what it means.
type Key = (Option<f64>, String);

/// A bar chart: its legend in rows across the top, then each panel's grid, bars and axis;
/// with no bars at all, "not measured" and `why`.
fn bar_chart(id: &str, title: &str, why: &str, keys: &[Key], panels: &[Panel]) -> String {
    let bars = |groups: &[Group]| groups.iter().flat_map(|(_, bars)| bars).count();
    if panels.iter().all(|panel| bars(&panel.4) == 0) {
        return not_measured(id, title, why);
    }
    let mut svg = Svg::default();
    let (mut x, mut y) = (16.0, 52.0);
    for (shade, label) in keys {
        let width = 26.0 + label.chars().count() as f64 * CHAR + 22.0;
        if x + width > WIDTH - 16.0 {
            (x, y) = (16.0, y + 20.0);
        }
        match shade {
            Some(shade) => {
                let style = format!("fill=\"#555\" fill-opacity=\"{shade}\"");
                svg.rect((x, y - 10.0), (18.0, 12.0), &style);
            }
            None => svg.whisker(x, x + 18.0, y - 4.0, 5.0),
        }
        svg.text((x + 26.0, y), "key start", label);
        x += width;
    }
    y += 18.0;
    for (heading, axis, format, log, groups) in panels {
        if let Some(heading) = heading {
            svg.text((16.0, y + 18.0), "heading start", heading);
            y += 30.0;
        }
        if bars(groups) == 0 {
            svg.text((BAR_LEFT, y + 16.0), "none start", "not measured");
            y += 34.0;
            continue;
        }
        let all = groups.iter().flat_map(|(_, bars)| bars);
        let values = all.flat_map(|Bar(.., s)| [s.median, s.min, s.max]);
        let scale = Scale::over(values, true, *log);
        let px = |v: f64| BAR_LEFT + (BAR_RIGHT - BAR_LEFT) * scale.fraction(v);
        let (plot_top, mut rows) = (y, Svg::default());
        for (heading, bars) in groups.iter().filter(|(_, bars)| !bars.is_empty()) {
            if let Some((heading, colour)) = heading {
                rows.rect((16.0, y + 4.0), (12.0, 12.0), &format!("fill=\"{colour}\""));
                // Bold runs wider than the 7 px the other labels are fitted with.
                let label = fit(heading, (BAR_LEFT - 44.0) / (CHAR * 1.1));
                rows.text((34.0, y + 15.0), "label strong start", &label);
                y += 22.0;
            }
            for bar in bars {
                let heading = heading.as_ref().map(|(h, _)| h.as_str());
                draw_bar(&mut rows, y + 10.0, heading, bar, (*format, &px));
                y += 24.0;
            }
            y += 8.0;
        }
        // The grid goes first: what is drawn later paints over it.
        for t in scale.ticks() {
            svg.line((px(t), plot_top), (px(t), y), "class=\"grid\"");
            let label = if t == 0.0 { "0".to_owned() } else { format(t) };
            svg.text((px(t), y + 16.0), "tick middle", &label);
        }
        svg.0.push_str(&rows.0);
        svg.line((BAR_LEFT, plot_top), (BAR_LEFT, y), "stroke=\"#999\"");
        svg.line((BAR_LEFT, y), (BAR_RIGHT, y), "stroke=\"#999\"");
        let axis = format!("{axis}{}", if scale.log { " (log scale)" } else { "" });
        let mid = (BAR_LEFT + BAR_RIGHT) / 2.0;
        svg.text((mid, y + 36.0), "axis middle", &axis);
        y += 52.0;
    }
    svg.finish(id, title, y + 8.0)
}

/// One bar row centred at `mid`: its label left of the axis, its median right of its end,
/// and a tooltip that names the variant too (hovered, a bar is seen without its heading).
fn draw_bar(svg: &mut Svg, mid: f64, heading: Option<&str>, bar: &Bar, axis: Axis) {
    let (Bar(label, colour, shade, figure), (format, px)) = (bar, axis);
    let Spread { median, min, max } = *figure;
    let fitted = fit(label, (BAR_LEFT - 26.0) / CHAR);
    svg.text((BAR_LEFT - 10.0, mid + 4.0), "label end", &fitted);
    let width = (px(median) - BAR_LEFT).max(0.0);
    let named = heading.map_or(label.clone(), |heading| format!("{heading}, {label}"));
    let whisker = min.is_finite() && max.is_finite();
    let range = match whisker {
        true => format!(" ({}–{})", format(min), format(max)),
        false => String::new(),
    };
    let tip = escape(&format!("{named}: {}{range}", format(median)));
    let _ = write!(svg.0, "<g><title>{tip}</title>");
    let style = format!("fill=\"{colour}\" fill-opacity=\"{shade}\"");
    svg.rect((BAR_LEFT, mid - 8.0), (width, 16.0), &style);
    let mut end = BAR_LEFT + width;
    if whisker {
        svg.whisker(px(min), px(max), mid, 6.0);
        end = end.max(px(max));
    }
    svg.0.push_str("</g>");
    svg.text((end + 8.0, mid + 4.0), "value start", &format(median));
}

/// How a panel's figures read, and where a figure falls on its axis.
type Axis<'a> = (Format, &'a dyn Fn(f64) -> f64);

/// A group per variant, headed by it: its `bars`, given its colour.
fn per_variant(c: &Comparison, bars: impl Fn(&Variant, &'static str) -> Vec<Bar>) -> Vec<Group> {
    let group =
        |(i, v): (usize, &Variant)| (Some((v.label.clone(), colour(i))), bars(v, colour(i)));
    c.variants.iter().enumerate().map(group).collect()
}

/// A bar per variant that has `figure`, each in its own colour, under no heading.
fn one_each(c: &Comparison, figure: impl Fn(&Variant) -> Option<Spread>) -> Vec<Group> {
    let bar = |(i, v): (usize, &Variant)| Some(Bar(v.label.clone(), colour(i), 1.0, figure(v)?));
    let bars = c.variants.iter().enumerate().filter_map(bar);
    vec![(None, bars.collect())]
}

/// The whisker's key: least–most over `what`.
fn whisker_key(what: &str) -> Key {
    (None, format!("least–most over {what}; bar: median"))
}

pub(super) fn cold_chart(c: &Comparison) -> String {
    let sources = c.sources();
    let groups = per_variant(c, |v, colour| {
        let bar = |x: &Cold| {
            let label = format!("{} ({} runs)", x.source.said().phrase, x.runs);
            Bar(label, colour, x.source.said().shade, x.millis)
        };
        let colds = sources.iter().filter_map(|s| v.cold_from(*s));
        colds.map(bar).collect()
    });
    let key = |s: &Source| (Some(s.said().shade), s.said().meaning.to_owned());
    let mut keys: Vec<Key> = sources.iter().map(key).collect();
    keys.push(whisker_key("the fresh servers"));
    let axis = "time to answer /init (or the first request)";
    let panel: Panel = (None, axis, duration_ms, true, groups);
    let why = "no fresh server was timed";
    bar_chart("cold", COLD_TITLE, why, &keys, &[panel])
}

/// The memory chart's panels' headings.
const MEMORY_HEADINGS: [&str; 3] = [
    "resident set after /init (the server and its children; read from /proc)",
    "what each extra instance adds (PSS: each page counted once, however many instances map \
     it; estimated from /proc)",
    "the instance's own memory, from the activations' reports (linear memory; a native \
     child's peak resident set)",
];

pub(super) fn memory_chart(c: &Comparison) -> String {
    let mib: Format = |v| format!("{} MiB", figure(v));
    let kib: Format = |v| format!("{} KiB", figure(v));
    type Bytes = fn(&Variant) -> Option<u64>;
    let per_extra: Bytes = |v| v.resident_per_extra_instance;
    let figures: [(Bytes, &str, Format, f64); 3] = [
        (|v| v.resident_after_init, "resident memory", mib, 1048576.0),
        (per_extra, "memory per instance", kib, 1024.0),
        (|v| v.reported_memory, "instance memory", mib, 1048576.0),
    ];
    let panels: [Panel; 3] = std::array::from_fn(|k| {
        let (bytes, axis, format, unit) = figures[k];
        // In the unit shown, so that the axis steps are round in it; read once, no whisker.
        let read = |b: u64| Spread::new(b as f64 / unit, f64::NAN, f64::NAN);
        let bars = one_each(c, |v| bytes(v).map(read));
        (Some(MEMORY_HEADINGS[k]), axis, format, false, bars)
    });
    let key = "bar: one reading, in the variant's colour".to_owned();
    let keys = [(Some(1.0), key)];
    let why = "no server's memory was read";
    bar_chart("memory", MEMORY_TITLE, why, &keys, &panels)
}

pub(super) fn throughput_chart(c: &Comparison) -> String {
    let counts = c.connection_counts();
    // The most connections full, fewer lighter: the eye goes to the busiest load.
    let shade = |k: usize| match counts.len() {
        0 | 1 => 1.0,
        n => 0.45 + 0.55 * k as f64 / (n - 1) as f64,
    };
    let groups = per_variant(c, |v, colour| {
        let bar = |(k, &n): (usize, &usize)| {
            let figure = v.warm_at(n)?.per_second;
            Some(Bar(connections_phrase(n), colour, shade(k), figure))
        };
        counts.iter().enumerate().filter_map(bar).collect()
    });
    let key = |(k, &n): (usize, &usize)| (Some(shade(k)), connections_phrase(n));
    let mut keys: Vec<Key> = counts.iter().enumerate().map(key).collect();
    keys.push(whisker_key("the rounds"));
    let per_second = |v| format!("{}/s", rate(v));
    let panel: Panel = (None, "requests per second", per_second, false, groups);
    let why = "no variant was measured warm";
    bar_chart("throughput", THROUGHPUT_TITLE, why, &keys, &[panel])
}

pub(super) fn crash_chart(c: &Comparison) -> String {
    let groups = one_each(c, |v| v.crash_to_answer_ms);
    let axis = "time from the crash to the next good answer";
    let panel: Panel = (None, axis, duration_ms, true, groups);
    let why = "no variant was crashed on purpose";
    let keys = [whisker_key("the crashes")];
    bar_chart("crash", CRASH_TITLE, why, &keys, &[panel])
}
