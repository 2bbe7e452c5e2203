//! The page's charts, drawn as inline SVG: latency curves and bar panels, each saying what it leaves out.

use super::*;

pub(super) fn escape(text: &str) -> String {
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
    fn text(&mut self, (x, y): (f64, f64), class: &str, anchor: &str, content: &str) {
        let content = escape(content);
        let _ = write!(
            self.0,
            "<text class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{content}</text>"
        );
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let _ = write!(
            self.0,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {style}/>"
        );
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
    if label.chars().count() <= room {
        return label.to_owned();
    }
    let cut: String = label.chars().take(room - 1).collect();
    cut + "…"
}

/// A chart with nothing to draw still shows its title, and says so.
fn not_measured(id: &str, title: &str, why: &str) -> String {
    let mut svg = Svg::default();
    let _ = write!(
        svg.0,
        "<rect x=\"16\" y=\"40\" width=\"{}\" height=\"56\" fill=\"#fafafa\" stroke=\"#ddd\"/>",
        WIDTH - 32.0
    );
    svg.text((WIDTH / 2.0, 70.0), "none", "middle", "not measured");
    svg.text((WIDTH / 2.0, 88.0), "note", "middle", why);
    svg.finish(id, title, 110.0)
}

/// How a value maps onto an axis.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scale {
    Linear { lo: f64, hi: f64 },
    Log { lo: f64, hi: f64 },
}

/// A round step that cuts `range` into about `parts`.
fn nice_step(range: f64, parts: f64) -> f64 {
    let raw = (range / parts).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let nice = [1.0, 2.0, 5.0].into_iter().find(|n| raw / magnitude <= *n);
    nice.unwrap_or(10.0) * magnitude
}

impl Scale {
    /// Bars start at zero on a linear scale; past ~30x between the smallest and the largest
    /// value the small bars would be slivers, so the scale turns logarithmic.
    fn for_bars(values: &[f64], log_allowed: bool) -> Scale {
        let positive = values.iter().copied().filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = positive.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if hi <= 0.0 {
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
        let positive = values.filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = positive.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
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

    pub(super) fn ticks(self) -> Vec<f64> {
        let linear = |lo: f64, hi: f64| {
            let step = nice_step(hi - lo, 5.0);
            let first = (lo / step).ceil();
            (0..)
                .map(|k| (first + f64::from(k)) * step)
                .take_while(|t| *t <= hi * (1.0 + 1e-9))
                .collect()
        };
        let (lo, hi) = match self {
            Scale::Linear { lo, hi } => return linear(lo, hi),
            Scale::Log { lo, hi } => (lo, hi),
        };
        let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        // 1-2-5 reads best; decades alone when that crowds the axis, every integer
        // multiple when the range is too short for either.
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
        // Less than a decade between the ends: round steps read better than one lone
        // power of ten.
        linear(lo, hi)
    }
}

/// One line of a latency chart: whose it is, and its sorted latencies. Fresh variants are
/// dashed, so a variant and its fresh twin stay apart past ten colours.
pub struct Curve<'a> {
    pub label: &'a str,
    pub dashed: bool,
    pub warm: &'a Warm,
}

/// `bench --out`'s latency.svg: the rows' latency curves, drawn as the report draws them;
/// on its own, the chart carries the page's styles (its grid, ticks and labels are
/// classes of them).
pub fn latency_svg(curves: Vec<Curve>, connections: usize) -> String {
    let curves = curves.into_iter().enumerate().collect();
    curves_chart(curves, connections, Some(super::html::STYLE))
}

/// The latency distribution at one connection count: percentile on a nines scale (each
/// tick ten times rarer than the last, so the tail gets as much room as the body) against
/// latency on a log scale, each curve in its variant's colour; `style`, the CSS a chart
/// outside the page carries.
fn curves_chart(curves: Vec<(usize, Curve)>, connections: usize, style: Option<&str>) -> String {
    let title = format!(
        "latency by percentile at {}",
        connections_phrase(connections)
    );
    let id = format!("latency-{connections}");
    let series: Vec<(usize, Curve)> = curves
        .into_iter()
        .filter(|(_, curve)| !curve.warm.micros.is_empty())
        .collect();
    if series.is_empty() {
        let why = "no variant was measured warm at this connection count";
        return not_measured(&id, &title, why);
    }
    // Sample i of n sits at p = i/n: the first at 0, the largest at 1 - 1/n, the cap.
    let nines = |p: f64| -(1.0 - p).log10();
    let x_max = series
        .iter()
        .map(|(_, curve)| (curve.warm.micros.len() as f64).log10())
        .fold(nines(0.9), f64::max);
    let y = Scale::log_around(
        series
            .iter()
            .flat_map(|(_, c)| c.warm.micros.iter().copied()),
    );
    let entry = 38.0;
    let (left, right, top) = (90.0, 790.0, 58.0);
    let bottom = f64::max(430.0, top + entry * series.len() as f64 + 10.0);
    let px = |x: f64| left + (right - left) * (x / x_max);
    let py = |v: f64| bottom - (bottom - top) * y.fraction(v);

    let mut svg = Svg::default();
    if let Some(style) = style {
        let _ = write!(svg.0, "<style>{style}</style>");
    }
    for t in y.ticks() {
        svg.line((left, py(t)), (right, py(t)), "class=\"grid\"");
        svg.text((left - 8.0, py(t) + 4.0), "tick", "end", &duration_us(t));
    }
    for label in ["0", "50", "90", "99", "99.9", "99.99", "99.999", "99.9999"] {
        let x = nines(label.parse::<f64>().unwrap_or(0.0) / 100.0);
        if x > x_max + 1e-9 {
            continue;
        }
        svg.line((px(x), top), (px(x), bottom), "class=\"grid\"");
        svg.line((px(x), bottom), (px(x), bottom + 5.0), "stroke=\"#777\"");
        svg.text((px(x), bottom + 19.0), "tick", "middle", label);
    }
    let _ = write!(
        svg.0,
        "<rect class=\"frame\" x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\"/>",
        right - left,
        bottom - top
    );
    let axis = "percentile (nines scale: 90, 99, 99.9 … evenly spaced, so the tail is readable)";
    svg.text(
        ((left + right) / 2.0, bottom + 44.0),
        "axis",
        "middle",
        axis,
    );
    let mid = (top + bottom) / 2.0;
    let _ = write!(
        svg.0,
        "<text class=\"axis\" x=\"22\" y=\"{mid:.1}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {mid:.1})\">latency (log scale)</text>"
    );
    let dashes = |curve: &Curve| match curve.dashed {
        true => " stroke-dasharray=\"7 4\"",
        false => "",
    };
    for (i, curve) in &series {
        let micros = &curve.warm.micros;
        let n = micros.len();
        let own_max = (n as f64).log10();
        // Enough points for a smooth line at this width; the samples they fall on are exact.
        let steps = 600;
        let mut points = String::new();
        let mut last = usize::MAX;
        for k in 0..=steps {
            let x = own_max * k as f64 / steps as f64;
            let index = (((n as f64) * (1.0 - 10f64.powf(-x))).floor() as usize).min(n - 1);
            if index != last || k == steps {
                last = index;
                let _ = write!(points, "{:.1},{:.1} ", px(x), py(micros[index]));
            }
        }
        let _ = write!(
            svg.0,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\"{} \
             stroke-linejoin=\"round\" points=\"{}\"><title>{}</title></polyline>",
            colour(*i),
            dashes(curve),
            points.trim_end(),
            escape(curve.label)
        );
    }
    // The legend, right of the plot, with each line's own figures under its name.
    let lx = right + 20.0;
    for (k, (i, curve)) in series.iter().enumerate() {
        let (w, ly) = (curve.warm, top + 12.0 + entry * k as f64);
        let stroke = format!(
            "stroke=\"{}\" stroke-width=\"3\"{}",
            colour(*i),
            dashes(curve)
        );
        svg.line((lx, ly - 4.0), (lx + 28.0, ly - 4.0), &stroke);
        let label = fit(curve.label, (WIDTH - lx - 44.0) / CHAR);
        svg.text((lx + 36.0, ly), "label", "start", &label);
        let figures = format!(
            "p50 {} · p99 {} · max {}",
            duration_us(w.p50.median),
            duration_us(w.p99.median),
            duration_us(w.micros[w.micros.len() - 1])
        );
        svg.text((lx + 36.0, ly + 16.0), "note", "start", &figures);
    }
    svg.finish(&id, &title, bottom + 62.0)
}

/// One horizontal bar: a median, and the least–most whisker around it.
struct Bar {
    label: String,
    colour: &'static str,
    opacity: f64,
    median: f64,
    range: Option<(f64, f64)>,
}

impl Bar {
    /// A bar of `figure`, its whisker its least and most where they are known.
    fn of(label: String, (colour, opacity): (&'static str, f64), figure: Spread) -> Bar {
        let range = figure.min.is_finite() && figure.max.is_finite();
        Bar {
            label,
            colour,
            opacity,
            median: figure.median,
            range: range.then_some((figure.min, figure.max)),
        }
    }
}

/// Bars under one heading (a variant, in its colour), or bars that name themselves.
type Group = (Option<(String, &'static str)>, Vec<Bar>);

/// A block of groups on an axis of its own, under its heading.
struct Panel {
    heading: Option<&'static str>,
    axis: &'static str,
    format: fn(f64) -> String,
    log_allowed: bool,
    groups: Vec<Group>,
}

/// What a legend's entry shows: a shade of the bars, or the whisker.
enum Key {
    Swatch(f64),
    Whisker,
}

/// The legend's entries in rows across the chart, from `y`; returns the last row's `y`.
fn key_row(svg: &mut Svg, mut y: f64, keys: &[(Key, String)]) -> f64 {
    let mut x = 16.0;
    for (key, label) in keys {
        let width = 26.0 + label.chars().count() as f64 * CHAR + 22.0;
        if x + width > WIDTH - 16.0 {
            (x, y) = (16.0, y + 20.0);
        }
        match key {
            Key::Swatch(opacity) => {
                let _ = write!(
                    svg.0,
                    "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"18\" height=\"12\" fill=\"#555\" \
                     fill-opacity=\"{opacity}\"/>",
                    y - 10.0
                );
            }
            Key::Whisker => whisker(svg, x, x + 18.0, y - 4.0, 5.0),
        }
        svg.text((x + 26.0, y), "key", "start", label);
        x += width;
    }
    y
}

/// A least–most whisker from `a` to `b` at height `y`, its ends `reach` up and down.
fn whisker(svg: &mut Svg, a: f64, b: f64, y: f64, reach: f64) {
    svg.line((a, y), (b, y), "class=\"whisker\"");
    svg.line((a, y - reach), (a, y + reach), "class=\"whisker\"");
    svg.line((b, y - reach), (b, y + reach), "class=\"whisker\"");
}

/// A bar chart: its legend, then each panel's bars, grid and axis.
fn bar_chart(id: &str, title: &str, keys: &[(Key, String)], panels: &[Panel]) -> String {
    let mut svg = Svg::default();
    let mut y = key_row(&mut svg, 52.0, keys) + 18.0;
    for panel in panels {
        if let Some(heading) = panel.heading {
            svg.text((16.0, y + 18.0), "heading", "start", heading);
            y += 30.0;
        }
        let bars = || panel.groups.iter().flat_map(|(_, bars)| bars);
        if bars().next().is_none() {
            svg.text((BAR_LEFT, y + 16.0), "none", "start", "not measured");
            y += 34.0;
            continue;
        }
        let values: Vec<f64> = bars()
            .flat_map(|b| {
                let (lo, hi) = b.range.unwrap_or((b.median, b.median));
                [b.median, lo, hi]
            })
            .collect();
        let scale = Scale::for_bars(&values, panel.log_allowed);
        let px = |v: f64| BAR_LEFT + (BAR_RIGHT - BAR_LEFT) * scale.fraction(v);
        let plot_top = y;
        let mut rows = Svg::default();
        for (heading, bars) in panel.groups.iter().filter(|(_, bars)| !bars.is_empty()) {
            if let Some((heading, colour)) = heading {
                let _ = write!(
                    rows.0,
                    "<rect x=\"16\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>",
                    y + 4.0
                );
                // Bold runs wider than the 7 px the other labels are fitted with.
                let label = fit(heading, (BAR_LEFT - 44.0) / (CHAR * 1.1));
                rows.text((34.0, y + 15.0), "label strong", "start", &label);
                y += 22.0;
            }
            for bar in bars {
                let heading = heading.as_ref().map(|(h, _)| h.as_str());
                draw_bar(&mut rows, y + 10.0, heading, bar, panel.format, &px);
                y += 24.0;
            }
            y += 8.0;
        }
        // The grid goes first: what is drawn later paints over it.
        for t in scale.ticks() {
            svg.line((px(t), plot_top), (px(t), y), "class=\"grid\"");
            let label = if t == 0.0 {
                "0".to_owned()
            } else {
                (panel.format)(t)
            };
            svg.text((px(t), y + 16.0), "tick", "middle", &label);
        }
        svg.0.push_str(&rows.0);
        svg.line((BAR_LEFT, plot_top), (BAR_LEFT, y), "stroke=\"#999\"");
        svg.line((BAR_LEFT, y), (BAR_RIGHT, y), "stroke=\"#999\"");
        let axis = match scale {
            Scale::Log { .. } => format!("{} (log scale)", panel.axis),
            Scale::Linear { .. } => panel.axis.to_owned(),
        };
        svg.text(
            ((BAR_LEFT + BAR_RIGHT) / 2.0, y + 36.0),
            "axis",
            "middle",
            &axis,
        );
        y += 52.0;
    }
    svg.finish(id, title, y + 8.0)
}

/// One bar row centred at `mid`: its label left of the axis, its median right of its end,
/// and a tooltip that names the variant too (hovered, a bar is seen without its heading).
fn draw_bar(
    svg: &mut Svg,
    mid: f64,
    heading: Option<&str>,
    bar: &Bar,
    format: fn(f64) -> String,
    px: &dyn Fn(f64) -> f64,
) {
    let label = fit(&bar.label, (BAR_LEFT - 26.0) / CHAR);
    svg.text((BAR_LEFT - 10.0, mid + 4.0), "label", "end", &label);
    let width = (px(bar.median) - BAR_LEFT).max(0.0);
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
        svg.0,
        "<g><title>{}</title><rect x=\"{BAR_LEFT}\" y=\"{:.1}\" width=\"{width:.1}\" \
         height=\"16\" fill=\"{}\" fill-opacity=\"{}\"/>",
        escape(&tip),
        mid - 8.0,
        bar.colour,
        bar.opacity
    );
    let mut end = BAR_LEFT + width;
    if let Some((lo, hi)) = bar.range {
        whisker(svg, px(lo), px(hi), mid, 6.0);
        end = end.max(px(hi));
    }
    svg.0.push_str("</g>");
    svg.text(
        (end + 8.0, mid + 4.0),
        "value",
        "start",
        &format(bar.median),
    );
}

/// Every chart of the page, each with what it leaves out and why, so that a missing bar
/// reads as a fact.
pub(super) fn charts(c: &Comparison) -> Vec<(String, Option<String>)> {
    let latency = c.connection_counts().into_iter().map(|n| {
        let curves = c.variants.iter().enumerate().filter_map(|(i, v)| {
            let dashed = v.lifetime == Lifetime::Fresh;
            Some((
                i,
                Curve {
                    label: &v.label,
                    dashed,
                    warm: v.warm_at(n)?,
                },
            ))
        });
        let not_at = format!("not measured at {}", connections_phrase(n));
        let left_out = left_out(c, |v| v.warm_at(n).is_none().then(|| not_at.clone()));
        (curves_chart(curves.collect(), n, None), left_out)
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

/// A group per variant that has bars (`bars`, given the variant's colour), headed by it.
fn per_variant(c: &Comparison, bars: impl Fn(&Variant, &'static str) -> Vec<Bar>) -> Vec<Group> {
    let groups = c
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| (Some((v.label.clone(), colour(i))), bars(v, colour(i))));
    groups.filter(|(_, bars)| !bars.is_empty()).collect()
}

/// A bar per variant that has `figure`, each in its own colour, under no heading.
fn one_each(c: &Comparison, figure: impl Fn(&Variant) -> Option<Spread>) -> Group {
    let bars = c
        .variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some(Bar::of(v.label.clone(), (colour(i), 1.0), figure(v)?)));
    (None, bars.collect())
}

fn cold_chart(c: &Comparison) -> String {
    let sources = c.sources();
    let groups = per_variant(c, |v, colour| {
        let colds = sources.iter().filter_map(|s| v.cold_from(*s));
        let bar = |x: &Cold| {
            let label = format!("{} ({} runs)", x.source.said().phrase, x.runs);
            Bar::of(label, (colour, x.source.said().shade), x.millis)
        };
        colds.map(bar).collect()
    });
    if groups.is_empty() {
        return not_measured("cold", COLD_TITLE, "no fresh server was timed");
    }
    let mut keys: Vec<(Key, String)> = sources
        .iter()
        .map(|s| (Key::Swatch(s.said().shade), s.said().meaning.to_owned()))
        .collect();
    let whisker = "least–most over the fresh servers; bar: median";
    keys.push((Key::Whisker, whisker.to_owned()));
    let panel = Panel {
        heading: None,
        axis: "time to answer /init (or the first request)",
        format: duration_ms,
        log_allowed: true,
        groups,
    };
    bar_chart("cold", COLD_TITLE, &keys, &[panel])
}

fn memory_chart(c: &Comparison) -> String {
    // In the unit shown, so that the axis steps are round in it; read once, no whisker.
    let bars = |figure: fn(&Variant) -> Option<u64>, unit: f64| {
        one_each(c, |v| {
            let value = figure(v)? as f64 / unit;
            Some(Spread {
                median: value,
                min: f64::NAN,
                max: f64::NAN,
            })
        })
    };
    let after_init = bars(|v| v.resident_after_init, f64::from(1 << 20));
    let per_extra = bars(|v| v.resident_per_extra_instance, 1024.0);
    if after_init.1.is_empty() && per_extra.1.is_empty() {
        return not_measured("memory", MEMORY_TITLE, "no server's memory was read");
    }
    let panel = |heading, axis, format, group| Panel {
        heading: Some(heading),
        axis,
        format,
        log_allowed: false,
        groups: vec![group],
    };
    let mib: fn(f64) -> String = |v| format!("{} MiB", figure(v));
    let panels = [
        panel(
            "resident set after /init (the server and its children; read from /proc)",
            "resident memory",
            mib,
            after_init,
        ),
        panel(
            "what each extra instance adds (PSS: each page counted once, however many \
             instances map it; estimated from /proc)",
            "memory per instance",
            |v| format!("{} KiB", figure(v)),
            per_extra,
        ),
        panel(
            "the instance's own memory, from the activations' reports (linear memory; a \
             native child's peak resident set)",
            "instance memory",
            mib,
            bars(|v| v.reported_memory, f64::from(1 << 20)),
        ),
    ];
    let keys = [(
        Key::Swatch(1.0),
        "bar: one reading, in the variant's colour".to_owned(),
    )];
    bar_chart("memory", MEMORY_TITLE, &keys, &panels)
}

fn throughput_chart(c: &Comparison) -> String {
    let counts = c.connection_counts();
    // The most connections full, fewer lighter: the eye goes to the busiest load.
    let opacity = |k: usize| match counts.len() {
        0 | 1 => 1.0,
        n => 0.45 + 0.55 * k as f64 / (n - 1) as f64,
    };
    let groups = per_variant(c, |v, colour| {
        let at = counts
            .iter()
            .enumerate()
            .filter_map(|(k, &n)| Some((k, n, v.warm_at(n)?)));
        let bar = |(k, n, w): (usize, usize, &Warm)| {
            Bar::of(connections_phrase(n), (colour, opacity(k)), w.per_second)
        };
        at.map(bar).collect()
    });
    if groups.is_empty() {
        let why = "no variant was measured warm";
        return not_measured("throughput", THROUGHPUT_TITLE, why);
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
        axis: "requests per second",
        format: |v| format!("{}/s", rate(v)),
        log_allowed: false,
        groups,
    };
    bar_chart("throughput", THROUGHPUT_TITLE, &keys, &[panel])
}

fn crash_chart(c: &Comparison) -> String {
    let group = one_each(c, |v| v.crash_to_answer_ms);
    if group.1.is_empty() {
        return not_measured("crash", CRASH_TITLE, "no variant was crashed on purpose");
    }
    let keys = [(
        Key::Whisker,
        "least–most over the crashes; bar: median".to_owned(),
    )];
    let panel = Panel {
        heading: None,
        axis: "time from the crash to the next good answer",
        format: duration_ms,
        log_allowed: true,
        groups: vec![group],
    };
    bar_chart("crash", CRASH_TITLE, &keys, &[panel])
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
    let said: Vec<String> = reasons
        .iter()
        .map(|(reason, labels)| format!("{} ({reason})", listed(labels)))
        .collect();
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
