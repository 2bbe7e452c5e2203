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
pub(super) const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

pub(super) fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

pub(super) const WIDTH: f64 = 1100.0;
/// A rough width of one character of the 13 px text, to lay legends out without a browser.
pub(super) const CHAR: f64 = 7.0;

pub(super) fn svg_open(out: &mut String, id: &str, title: &str, height: f64) {
    let title = escape(title);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{id}\" viewBox=\"0 0 {WIDTH} {height}\" \
         width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"{title}\">\
         <title>{title}</title><rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" \
         fill=\"#fff\"/><text class=\"title\" x=\"16\" y=\"26\">{title}</text>"
    );
}

pub(super) fn text(out: &mut String, x: f64, y: f64, class: &str, anchor: &str, content: &str) {
    let _ = write!(
        out,
        "<text class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>",
        escape(content)
    );
}

/// `label` cut to about `room` characters: the chart keeps its shape, and the whole label
/// is in the element's tooltip and in the table.
pub(super) fn fit(label: &str, room: f64) -> String {
    let room = room.max(4.0) as usize;
    if label.chars().count() <= room {
        return label.to_owned();
    }
    let mut cut: String = label.chars().take(room - 1).collect();
    cut.push('…');
    cut
}

pub(super) fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
    let _ = write!(
        out,
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {style}/>"
    );
}

/// A chart with nothing to draw still shows its title, and says so.
pub(super) fn not_measured(id: &str, title: &str, why: &str) -> String {
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
pub(super) enum Scale {
    Linear { lo: f64, hi: f64 },
    Log { lo: f64, hi: f64 },
}

/// A round step that cuts `range` into about `parts`.
pub(super) fn nice_step(range: f64, parts: f64) -> f64 {
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

    pub(super) fn ticks(self) -> Vec<f64> {
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
pub(super) fn latency_chart(c: &Comparison, connections: usize) -> String {
    let curves: Vec<(usize, Curve)> = c
        .variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let curve = Curve {
                label: &v.label,
                dashed: v.lifetime == Lifetime::Fresh,
                warm: v.warm_at(connections)?,
            };
            Some((i, curve))
        })
        .collect();
    curves_chart(curves, connections, None)
}

/// One line of a latency chart: whose it is, and its sorted latencies. Fresh variants are
/// dashed, so a variant and its fresh twin stay apart past ten colours.
pub struct Curve<'a> {
    pub label: &'a str,
    /// Fresh variants are dashed.
    pub dashed: bool,
    pub warm: &'a Warm,
}

impl Curve<'_> {
    fn dashes(&self) -> &'static str {
        if self.dashed {
            " stroke-dasharray=\"7 4\""
        } else {
            ""
        }
    }
}

/// `bench --out`'s latency.svg: the rows' latency curves, drawn as the report draws them.
pub fn latency_svg(curves: Vec<Curve>, connections: usize) -> String {
    // On its own, the chart carries the page's styles (its grid, ticks and labels are
    // classes of them).
    let styled = Some(super::html::STYLE);
    curves_chart(
        curves.into_iter().enumerate().collect(),
        connections,
        styled,
    )
}

/// The latency curves; `style`, the CSS a chart outside the page carries.
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
        .map(|(_, curve)| (curve.warm.micros.len() as f64).log10())
        .fold(0.0, f64::max)
        .max(nines(0.9));
    let y = Scale::log_around(
        series
            .iter()
            .flat_map(|(_, curve)| curve.warm.micros.iter().copied()),
    );

    let entry = 38.0;
    let (left, right, top) = (90.0, 790.0, 58.0);
    let bottom = f64::max(430.0, top + entry * series.len() as f64 + 10.0);
    let height = bottom + 62.0;
    let px = |x: f64| left + (right - left) * (x / x_max);
    let py = |v: f64| bottom - (bottom - top) * y.fraction(v);

    let mut out = String::new();
    svg_open(&mut out, &id, &title, height);
    if let Some(style) = style {
        let _ = write!(out, "<style>{style}</style>");
    }
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

    for (i, curve) in &series {
        let w = curve.warm;
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
            curve.dashes(),
            points.trim_end(),
            escape(curve.label)
        );
    }

    // The legend, right of the plot, with each line's own figures under its name.
    let lx = right + 20.0;
    for (k, (i, curve)) in series.iter().enumerate() {
        let w = curve.warm;
        let ly = top + 12.0 + entry * k as f64;
        line(
            &mut out,
            (lx, ly - 4.0),
            (lx + 28.0, ly - 4.0),
            &format!(
                "stroke=\"{}\" stroke-width=\"3\"{}",
                colour(*i),
                curve.dashes()
            ),
        );
        let room = (WIDTH - lx - 44.0) / CHAR;
        text(
            &mut out,
            lx + 36.0,
            ly,
            "label",
            "start",
            &fit(curve.label, room),
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
pub(super) struct Bar {
    label: String,
    colour: &'static str,
    opacity: f64,
    median: f64,
    range: Option<(f64, f64)>,
}

/// Bars under one heading (a variant), or bars that name themselves.
pub(super) struct Group {
    heading: Option<(String, &'static str)>,
    bars: Vec<Bar>,
}

/// A block of groups on one axis of its own.
pub(super) struct Panel {
    heading: Option<String>,
    axis: String,
    format: fn(f64) -> String,
    log_allowed: bool,
    groups: Vec<Group>,
}

pub(super) enum Key {
    Swatch(f64),
    Whisker,
}

pub(super) const BAR_LEFT: f64 = 290.0;
pub(super) const BAR_RIGHT: f64 = 950.0;

pub(super) fn key_row(out: &mut String, y: f64, keys: &[(Key, String)]) -> f64 {
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

pub(super) fn bar_chart(id: &str, title: &str, keys: &[(Key, String)], panels: &[Panel]) -> String {
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
pub(super) fn draw_bar(
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

pub(super) fn spread_range(s: &Spread) -> Option<(f64, f64)> {
    (s.min.is_finite() && s.max.is_finite()).then_some((s.min, s.max))
}

pub(super) const COLD_TITLE: &str =
    "cold start: a fresh server's first /init (or first answer), by where the code came from";

pub(super) fn cold_chart(c: &Comparison) -> String {
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
                .filter_map(|s| v.cold_from(*s))
                .map(|cold| Bar {
                    label: format!("{} ({} runs)", cold.source.said().phrase, cold.runs),
                    colour: colour(i),
                    opacity: cold.source.said().shade,
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
        .map(|s| (Key::Swatch(s.said().shade), s.said().meaning.to_owned()))
        .collect();
    keys.push((
        Key::Whisker,
        "least–most over the fresh servers; bar: median".to_owned(),
    ));
    let panel = Panel {
        heading: None,
        axis: "time to answer /init (or the first request)".to_owned(),
        format: duration_ms,
        log_allowed: true,
        groups,
    };
    bar_chart("cold", COLD_TITLE, &keys, &[panel])
}

pub(super) const MEMORY_TITLE: &str = "memory: resident after /init, and per extra instance";

pub(super) fn memory_chart(c: &Comparison) -> String {
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
    let reported = bars(|v| Some(v.reported_memory? as f64 / f64::from(1 << 20)));
    if after_init.bars.is_empty() && per_extra.bars.is_empty() {
        return not_measured("memory", MEMORY_TITLE, "no server's memory was read");
    }
    let mib = |v: f64| format!("{} MiB", figure(v));
    let kib = |v: f64| format!("{} KiB", figure(v));
    let panels = [
        Panel {
            heading: Some(
                "resident set after /init (the server and its children; read from /proc)"
                    .to_owned(),
            ),
            axis: "resident memory".to_owned(),
            format: mib,
            log_allowed: false,
            groups: vec![after_init],
        },
        Panel {
            heading: Some(
                "what each extra instance adds (PSS: each page counted once, however many \
                 instances map it; estimated from /proc)"
                    .to_owned(),
            ),
            axis: "memory per instance".to_owned(),
            format: kib,
            log_allowed: false,
            groups: vec![per_extra],
        },
        Panel {
            heading: Some(
                "the instance's own memory, from the activations' reports (linear memory; a \
                 native child's peak resident set)"
                    .to_owned(),
            ),
            axis: "instance memory".to_owned(),
            format: mib,
            log_allowed: false,
            groups: vec![reported],
        },
    ];
    let keys = [(
        Key::Swatch(1.0),
        "bar: one reading, in the variant's colour".to_owned(),
    )];
    bar_chart("memory", MEMORY_TITLE, &keys, &panels)
}

pub(super) const THROUGHPUT_TITLE: &str = "throughput: requests per second by connection count";

pub(super) fn throughput_chart(c: &Comparison) -> String {
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

pub(super) const CRASH_TITLE: &str = "recovery: from a crash to the next answer";

pub(super) fn crash_chart(c: &Comparison) -> String {
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
    if reasons.is_empty() {
        return None;
    }
    let said: Vec<String> = reasons
        .iter()
        .map(|(reason, labels)| format!("{} ({reason})", listed(labels)))
        .collect();
    Some(format!("Left out: {}.", said.join("; ")))
}

/// Why a variant has no line in the latency chart at `connections`.
pub(super) fn latency_left_out(c: &Comparison, connections: usize) -> Option<String> {
    left_out(c, |v| {
        v.warm_at(connections)
            .is_none()
            .then(|| format!("not measured at {}", connections_phrase(connections)))
    })
}

pub(super) fn cold_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        if !v.cold.is_empty() {
            return None;
        }
        Some(match v.lifetime {
            Lifetime::Fresh => "a fresh instance per activation changes nothing at /init: its \
                                cold start is its persistent twin's"
                .to_owned(),
            Lifetime::Persistent | Lifetime::AsServed => {
                "no fresh server of it was timed".to_owned()
            }
        })
    })
}

pub(super) fn memory_left_out(c: &Comparison) -> Option<String> {
    let per_extra = left_out(c, |v| {
        if v.resident_per_extra_instance.is_some() {
            return None;
        }
        Some(match v.lifetime {
            Lifetime::Fresh => "from what each extra instance adds: a fresh variant keeps none, \
                                each activation's is dropped"
                .to_owned(),
            Lifetime::Persistent | Lifetime::AsServed if c.conditions.concurrency <= 1 => {
                "from what each extra instance adds: the servers ran one (--concurrency 1)"
                    .to_owned()
            }
            Lifetime::Persistent | Lifetime::AsServed => {
                "from what each extra instance adds: its memory was not read".to_owned()
            }
        })
    });
    let after_init = left_out(c, |v| {
        v.resident_after_init
            .is_none()
            .then(|| "from what it holds after /init: not read".to_owned())
    });
    let said: Vec<String> = after_init.into_iter().chain(per_extra).collect();
    (!said.is_empty()).then(|| said.join(" "))
}

pub(super) fn throughput_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        v.warm.is_empty().then(|| "not measured warm".to_owned())
    })
}

pub(super) fn crash_left_out(c: &Comparison) -> Option<String> {
    left_out(c, |v| {
        if v.crash_to_answer_ms.is_some() {
            return None;
        }
        if v.row {
            return Some("the rows crash nothing".to_owned());
        }
        Some(match (v.form.server, v.form.backend, v.form.protocol, v.lifetime) {
            (Server::Url, ..) => "a server given by --url is not crashed",
            (Server::WasmtimeServe, ..) => "the peer is not crashed",
            (_, _, Protocol::Plain, _) => {
                "a plain HTTP server takes the request itself, not a /run body that makes the \
                 action trap"
            }
            (_, Some(Backend::Native), _, Lifetime::Fresh) => {
                "a fresh native process lives for one activation: there is none to kill between two"
            }
            (_, Some(Backend::Native), ..) => "its process was not killed",
            _ => {
                "WebAssembly is crashed only from inside, by a request that makes it trap: give \
                 one with --crash-body"
            }
        }
        .to_owned())
    })
}
