//! The comparison as the terminal reads it: the warm figures, the cold starts, then the verdicts, notes and wrong answers.

use super::*;

/// The terminal tables (warm figures, then cold starts), then the verdicts, the notes and
/// the wrong answers.
pub fn table(c: &Comparison) -> String {
    let counts = c.connection_counts();
    let sources = c.sources();
    let spread = |s: &Spread| format!("{} [{}–{}]", figure(s.median), figure(s.min), figure(s.max));
    let kilo = |s: &Spread| Spread::new(s.median / 1e3, s.min / 1e3, s.max / 1e3);

    // The figures a verdict compares carry their spread: the p50 at the fewest
    // connections, the p99 and the rate at the most, every cold start.
    let (low, most) = (counts.first().copied(), counts.last().copied());
    let mut header = vec!["variant".to_owned()];
    for (i, n) in counts.iter().enumerate() {
        let unit = if i == 0 { " µs" } else { "" };
        header.extend([
            format!("p50@{n}{unit}"),
            format!("p99@{n}"),
            format!("kreq/s@{n}"),
        ]);
    }
    // At the most connections alone: a request costs about the same at each count, and
    // the table is wide already.
    header.extend(most.map(|n| format!("srv@{n}")));
    header.extend(["MiB", "+KiB", "cpu", "mem", "crash", "err"].map(str::to_owned));

    let mut rows = vec![header];
    for v in &c.variants {
        let mut row = vec![v.label.clone()];
        for &n in &counts {
            let warm = v.warm_at(n);
            let cell = |f: &dyn Fn(&Warm) -> String| warm.map_or("-".to_owned(), f);
            let shown = |s: &Spread, compared: bool| match compared {
                true => spread(s),
                false => figure(s.median),
            };
            row.push(cell(&|w| shown(&w.p50, Some(n) == low)));
            row.push(cell(&|w| shown(&w.p99, Some(n) == most)));
            row.push(cell(&|w| shown(&kilo(&w.per_second), Some(n) == most)));
        }
        if let Some(n) = most {
            let server = v.warm_at(n).and_then(|w| w.server_cpu_us);
            row.push(server.map_or("-".to_owned(), figure));
        }
        let mib = |b: u64| figure(b as f64 / f64::from(1 << 20));
        let kib = |b: u64| figure(b as f64 / 1024.0);
        let median = |s: Spread| figure(s.median);
        row.push(v.resident_after_init.map_or("-".to_owned(), mib));
        row.push(v.resident_per_extra_instance.map_or("-".to_owned(), kib));
        row.push(v.reported_cpu_us.map_or("-".to_owned(), figure));
        row.push(v.reported_memory.map_or("-".to_owned(), mib));
        row.push(v.crash_to_answer_ms.map_or("-".to_owned(), median));
        row.push(v.errors.to_string());
        rows.push(row);
    }

    let mut out = aligned(&rows);
    // The cold starts in a table of their own, each beside its spread: in the first, they
    // made it too wide to read; and fresh variants, whose start is their twin's, have none.
    if !sources.is_empty() {
        let mut header = vec!["cold start, ms".to_owned()];
        header.extend(sources.iter().map(|s| s.said().header.to_owned()));
        let mut rows = vec![header];
        for v in c.variants.iter().filter(|v| !v.cold.is_empty()) {
            let mut row = vec![v.label.clone()];
            let cell = |s: &Source| v.cold_from(*s).map(|x| spread(&x.millis));
            row.extend(sources.iter().map(|s| cell(s).unwrap_or("-".into())));
            rows.push(row);
        }
        out.push_str(&aligned(&rows));
    }

    let mut legend = String::from("(");
    if let (Some(first), Some(last)) = (counts.first(), counts.last()) {
        let compared = format!("p50@{first}, p99@{last} and kreq/s@{last}");
        let _ = write!(
            legend,
            "@N: at N connections; latencies in µs; kreq/s: thousands of requests per second; \
             {compared}, the figures the verdicts compare: median over rounds [least–most], \
             the others their median; srv: the server's CPU per request in µs, its children's \
             included (both sides of a 2-CPU machine share it with the client: see the CSV's \
             client_cpu_us); "
        );
    }
    if !sources.is_empty() {
        let name = |s: &Source| format!("{}: {}", s.said().header, s.said().meaning);
        let named: Vec<String> = sources.iter().map(name).collect();
        let _ = write!(
            legend,
            "cold starts in ms ({}), median [least–most] of {} fresh servers; ",
            named.join(", "),
            c.conditions.cold_runs
        );
    }
    legend.push_str(
        "MiB: resident after /init, read once (a verdict on it needs two readings more \
         than 10% apart); +KiB: what each extra instance adds, each page counted once however \
         many instances map it (PSS), both estimated from /proc; cpu: one \
         activation's CPU time in µs and mem: its instance's MiB, both read from the \
         activations' own reports (median; json logs, on a server of their own); crash: ms \
         from a crash to the next answer; err: wrong answers)\n",
    );
    out.push_str(&legend);
    let host = host_conditions(&c.conditions).into_iter();
    let host: Vec<String> = host
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    if !host.is_empty() {
        let pinned = ["not pinned", "pinned"][usize::from(c.conditions.pinned)];
        let _ = writeln!(out, "(conditions: {pinned}; {})", host.join("; "));
    }

    for verdict in verdicts(c, false) {
        let _ = writeln!(out, "{verdict}");
    }
    for line in verdicts(c, true) {
        let _ = writeln!(out, "bottom line, {line}");
    }
    // A host whose speed moved puts every figure in doubt: a warning, not a note.
    let moved = host_speed_note(c);
    for note in all_notes(c) {
        let warning = moved.as_ref() == Some(&note);
        let marker = if warning { "warning" } else { "note" };
        let _ = writeln!(out, "{marker}: {}", bare(&note));
    }
    for v in c.variants.iter().filter(|v| v.errors > 0) {
        out.push_str(&wrong_line(v, &c.conditions));
        out.push('\n');
    }
    out
}

/// `rows` as lines of aligned columns: the first to the left, the others to the right.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            let _ = match i {
                0 => write!(line, "{cell:<width$}"),
                _ => write!(line, "  {cell:>width$}"),
            };
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
