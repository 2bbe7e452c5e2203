//! The bench report's HTML page as a browser draws it: headless Chromium renders every chart.
#![cfg(feature = "bench")]

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmloop_bench::report::{Cold, Comparison, Conditions, Host, Spread, Variant, Warm, html};

/// Chromium's first start on a loaded 2-core machine takes seconds; a hung one must not
/// hold the test run.
const CHROMIUM_WAIT: Duration = Duration::from_secs(120);

const TITLES: [&str; 6] = [
    "latency by percentile at 1 connection",
    "latency by percentile at 8 connections",
    "cold start: a fresh server's first /init (or first answer), by where the code came from",
    "memory: resident after /init, and per extra instance",
    "throughput: requests per second by connection count",
    "recovery: from a crash to the next answer",
];

fn spread(median: f64) -> Spread {
    Spread {
        median,
        min: median * 0.93,
        max: median * 1.08,
    }
}

fn warm(connections: usize, base: f64) -> Warm {
    // A body around `base` and a tail that climbs to 20x it over the slowest percent.
    let micros: Vec<f64> = (0..5000)
        .map(|i| {
            let f = f64::from(i) / 5000.0;
            let tail = if f > 0.99 { (f - 0.99) * 1900.0 } else { 0.0 };
            base * (0.9 + 0.3 * f + tail)
        })
        .collect();
    Warm {
        connections,
        p50: spread(micros[2500]),
        p99: spread(micros[4950]),
        per_second: spread(1e6 * connections as f64 / base / 1.5),
        server_cpu_us: Some(base * 0.6),
        client_cpu_us: Some(base * 0.3),
        micros,
    }
}

fn variant(backend: &str, compiler: Option<&str>, lifetime: &str, base: f64) -> Variant {
    Variant {
        warm: vec![warm(1, base), warm(8, base * 2.4)],
        resident_after_init: Some((base as u64 / 2) << 20),
        resident_per_extra_instance: Some((base as u64 * 8) << 10),
        ..Variant::named(
            backend.parse().unwrap(),
            compiler.map(|c| c.parse().unwrap()),
            lifetime.parse().unwrap(),
        )
    }
}

fn cold(source: &str, ms: f64) -> Cold {
    Cold {
        source: source.parse().unwrap(),
        millis: spread(ms),
        runs: 5,
    }
}

/// No crash figures: that chart must say "not measured" rather than draw an empty frame.
fn comparison() -> Comparison {
    let mut module = variant("module", Some("cranelift"), "persistent", 31.0);
    module.cold = vec![
        cold("compiled", 21.0),
        cold("cache", 1.8),
        cold("signed", 3.9),
    ];
    let fresh = variant("module", Some("cranelift"), "fresh", 60.0);
    let mut component = variant("component", Some("winch"), "persistent", 70.0);
    component.cold = vec![cold("compiled", 240.0), cold("cache", 25.0)];
    let mut native = variant("native", None, "persistent", 38.0);
    native.label = "native <persistent> & \"pipes\"".to_owned();
    native.cold = vec![cold("start", 2.2)];
    native.errors = 2;
    native.first_wrong = Some("500 `<oops>`, expected 200 `{\"ok\":true}`".to_owned());
    Comparison {
        conditions: Conditions {
            version: "0.1.0".to_owned(),
            commit: "abc1234".to_owned(),
            cpu_model: "Test CPU".to_owned(),
            cpus: 1,
            pinned: true,
            online: 2,
            before: Host {
                load: Some(0.05),
                reference_ms: Some(spread(20.0)),
            },
            after: Host {
                load: Some(1.4),
                reference_ms: Some(spread(20.5)),
            },
            date: "2025-01-02T03:04:05Z".to_owned(),
            hits: 5000,
            rounds: 10,
            concurrency: 2,
            body: "{\"value\":{\"name\":\"bench\"}}".to_owned(),
            body_given: false,
            expect: None,
            cold_runs: 5,
        },
        variants: vec![module, fresh, component, native],
        notes: vec!["the run shared its CPU with a build".to_owned()],
    }
}

/// Runs Chromium headless on `page` with `args`, its stdout into `out`; panics unless it
/// exits 0 in time.
fn chromium(dir: &Path, page: &Path, args: &[String], out: &Path) {
    let program = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".to_owned());
    let profile = tempfile::tempdir_in(dir).expect("a profile folder");
    let mut child = Command::new(&program)
        .args([
            "--headless",
            // The tests run as root in CI, where Chromium's sandbox refuses to start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(File::create(out).expect("chromium's stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): install it (apt-get install -y chromium)")
        });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium's status") {
            break status;
        }
        if started.elapsed() > CHROMIUM_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} {args:?} did not finish in {CHROMIUM_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{program} {args:?} exited with {status}");
}

/// A decoded 8-bit RGB or RGBA PNG, non-interlaced (what Chromium writes): the `png` crate
/// is not among the dependencies, flate2 is, and the rest is a few lines of the format.
struct Image {
    width: usize,
    height: usize,
    /// RGB, row by row.
    rgb: Vec<[u8; 3]>,
}

fn decode_png(bytes: &[u8]) -> Image {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut header, mut compressed) = (8, None, Vec::new());
    while at + 8 <= bytes.len() {
        let length = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + length];
        match kind {
            b"IHDR" => header = Some(data.to_vec()),
            b"IDAT" => compressed.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        // Length, type, data and the CRC.
        at += 12 + length;
    }
    let header = header.expect("an IHDR chunk");
    let width = u32::from_be_bytes(header[0..4].try_into().unwrap()) as usize;
    let height = u32::from_be_bytes(header[4..8].try_into().unwrap()) as usize;
    let (depth, colour, interlace) = (header[8], header[9], header[12]);
    let channels = match (depth, colour, interlace) {
        (8, 2, 0) => 3,
        (8, 6, 0) => 4,
        _ => {
            panic!("an unexpected PNG: depth {depth}, colour type {colour}, interlace {interlace}")
        }
    };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(compressed.as_slice())
        .read_to_end(&mut raw)
        .expect("the image data inflates");
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "the image data's size");
    let mut previous = vec![0u8; stride];
    let mut rgb = Vec::with_capacity(width * height);
    for row in raw.chunks_exact(stride + 1) {
        let (filter, mut line) = (row[0], row[1..].to_vec());
        for i in 0..stride {
            let a = if i >= channels { line[i - channels] } else { 0 };
            let b = previous[i];
            let c = if i >= channels {
                previous[i - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = (
                        (p - i16::from(a)).abs(),
                        (p - i16::from(b)).abs(),
                        (p - i16::from(c)).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            line[i] = line[i].wrapping_add(predicted);
        }
        rgb.extend(line.chunks_exact(channels).map(|p| [p[0], p[1], p[2]]));
        previous = line;
    }
    Image { width, height, rgb }
}

#[test]
fn the_report_page_renders_in_chromium_with_every_chart() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let page = dir.path().join("report.html");
    std::fs::write(&page, html(&comparison())).expect("the page written");

    let dom = dir.path().join("dom.html");
    chromium(dir.path(), &page, &["--dump-dom".to_owned()], &dom);
    let dom = std::fs::read_to_string(&dom).expect("the dumped DOM");
    assert!(
        dom.matches("<svg").count() >= TITLES.len(),
        "too few charts:\n{dom}"
    );
    // The DOM is serialized anew: quotes in text come out bare, `&`, `<` and `>` escaped.
    for title in TITLES {
        assert!(
            dom.contains(&format!("<title>{title}</title>")),
            "no chart titled {title:?} in the DOM"
        );
    }
    let crash = dom
        .split("<svg")
        .find(|svg| svg.contains(TITLES[5]))
        .expect("the crash chart");
    assert!(crash.contains("not measured"), "{crash}");
    assert!(
        dom.contains("native &lt;persistent&gt; &amp; \"pipes\""),
        "the label with markup, escaped"
    );
    assert!(!dom.contains("<persistent>"), "a label became an element");

    // A blank page's screenshot is all white; this one must be drawn, in colour: the
    // variants' lines, swatches and bars each cover many pixels of exactly their colour.
    let shot = dir.path().join("shot.png");
    let screenshot = format!("--screenshot={}", shot.display());
    chromium(
        dir.path(),
        &page,
        &[screenshot],
        &dir.path().join("shot.out"),
    );
    let image = decode_png(&std::fs::read(&shot).expect("the screenshot"));
    assert_eq!((image.width, image.height), (1200, 2400));
    let inked = image
        .rgb
        .iter()
        .filter(|p| p.iter().any(|c| *c < 200))
        .count();
    assert!(
        inked * 100 > image.rgb.len(),
        "only {inked} of {} pixels are drawn",
        image.rgb.len()
    );
    let mut counts = std::collections::HashMap::new();
    for p in image.rgb.iter().filter(|p| {
        let (hi, lo) = (p.iter().max().unwrap(), p.iter().min().unwrap());
        hi - lo >= 60
    }) {
        *counts.entry(*p).or_insert(0usize) += 1;
    }
    let colours = counts.values().filter(|n| **n >= 40).count();
    assert!(
        colours >= 4,
        "the screenshot has {colours} colours of 40 pixels or more, one per variant expected"
    );
}
