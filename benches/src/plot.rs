//! `--plot`: each workload's rows as horizontal bars, ops/s on the left and p99 latency on the
//! right, in one self-contained SVG file. Written by hand (plain strings, text escaped) rather
//! than with a plotting crate: the picture is a few dozen rectangles and labels, and the bench
//! should not pull a graphics stack into the workspace for them.

use std::fmt::Write as _;

use crate::contenders::BenchError;
use crate::measurement::Measurement;

// Labels are escaped as the history checker's timeline pictures are.
use lock_testkit::xml_escape as escape;

/// One bar pair: a row of a workload with its throughput and its p99 latency.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotRow {
    /// `W1`, `W2C`, ...
    pub workload: String,
    /// The row's name, e.g. `distlock-fixed`.
    pub contender: String,
    /// Ops (lock + unlock pairs; W3 handoffs, W6 wake-ups, W7 acquire + release pairs, W8W
    /// write attempts) per second.
    pub ops_per_sec: f64,
    /// 99th percentile latency in microseconds (W8W: of the writer's wait).
    pub p99_us: f64,
}

impl PlotRow {
    /// The row as measured in this run.
    pub fn of(row: &Measurement) -> Self {
        PlotRow {
            workload: row.workload.to_owned(),
            contender: row.contender.to_owned(),
            ops_per_sec: row.ops_per_sec(),
            p99_us: row.quantile_us(0.99),
        }
    }
}

/// The rows of a JSON file written by `--json`: its `medians` (the rows of the summary), or its
/// `results` when it has no medians.
///
/// # Errors
///
/// When the text is not JSON or has neither list, or a row lacks one of the fields plotted.
pub fn rows_from_json(text: &str) -> Result<Vec<PlotRow>, BenchError> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
    let list = ["medians", "results"]
        .iter()
        .filter_map(|key| json.get(key).and_then(serde_json::Value::as_array))
        .find(|list| !list.is_empty())
        .ok_or("no `medians` or `results` rows")?;
    list.iter()
        .enumerate()
        .map(|(index, row)| {
            let text = |key: &str| {
                row.get(key)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("row {index}: no `{key}`"))
            };
            let number = |key: &str| {
                row.get(key)
                    .and_then(serde_json::Value::as_f64)
                    .ok_or_else(|| format!("row {index}: no `{key}`"))
            };
            Ok(PlotRow {
                workload: text("workload")?,
                contender: text("contender")?,
                ops_per_sec: number("ops_per_sec")?,
                p99_us: number("p99_us")?,
            })
        })
        .collect()
}

/// Total width of the picture, and of its parts, in pixels.
const WIDTH: f64 = 960.0;
const MARGIN: f64 = 16.0;
const LABEL: f64 = 160.0;
const CHART: f64 = 280.0;
const GAP: f64 = 100.0;
const ROW: f64 = 20.0;
const BAR: f64 = 14.0;
const PANEL_HEAD: f64 = 44.0;
const PANEL_GAP: f64 = 18.0;

/// Rows of the library itself (drawn in colour) rather than a floor or a peer (grey).
fn is_distlock(contender: &str) -> bool {
    !(contender.starts_with("ping")
        || contender.starts_with("raw-")
        || contender.starts_with("rslock"))
}

/// The picture: a title, then one panel per workload (in first-seen order) with one row per
/// contender; each panel has its own scales (workloads differ by orders of magnitude).
pub fn svg(title: &str, rows: &[PlotRow]) -> String {
    let mut workloads: Vec<&str> = Vec::new();
    for row in rows {
        if !workloads.contains(&row.workload.as_str()) {
            workloads.push(&row.workload);
        }
    }
    let panel_height = |count: usize| PANEL_HEAD + ROW * count as f64 + PANEL_GAP;
    let body: f64 = workloads
        .iter()
        .map(|workload| panel_height(rows.iter().filter(|r| r.workload == *workload).count()))
        .sum();
    let height = 70.0 + body;
    let ops_x = MARGIN + LABEL;
    let p99_x = ops_x + CHART + GAP;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{MARGIN}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    // Legend.
    let _ = writeln!(
        out,
        r##"<rect x="{MARGIN}" y="36" width="12" height="12" fill="#2b6cb0"/><text x="{}" y="46">distlock rows</text><rect x="{}" y="36" width="12" height="12" fill="#a0aec0"/><text x="{}" y="46">floors and peers (ping, raw-*, rslock*)</text><text x="{}" y="46" text-anchor="end">each panel on its own scale</text>"##,
        MARGIN + 16.0,
        MARGIN + 120.0,
        MARGIN + 136.0,
        WIDTH - MARGIN
    );

    let mut y = 70.0;
    for workload in &workloads {
        let panel: Vec<&PlotRow> = rows.iter().filter(|r| r.workload == *workload).collect();
        let max_ops = panel.iter().map(|r| r.ops_per_sec).fold(0.0, f64::max);
        let max_p99 = panel.iter().map(|r| r.p99_us).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            r##"<g class="panel" data-workload="{}"><rect x="{}" y="{y}" width="{}" height="{}" fill="#f7fafc" stroke="#e2e8f0"/>"##,
            escape(workload),
            MARGIN / 2.0,
            WIDTH - MARGIN,
            panel_height(panel.len()) - PANEL_GAP / 2.0
        );
        let _ = writeln!(
            out,
            r##"<text x="{MARGIN}" y="{}" font-size="14" font-weight="bold">{}</text><text x="{ops_x}" y="{}" fill="#4a5568">ops/s (longer is faster)</text><text x="{p99_x}" y="{}" fill="#4a5568">p99 latency, µs (shorter is faster)</text>"##,
            y + 18.0,
            escape(workload),
            y + 36.0,
            y + 36.0,
        );
        for (index, row) in panel.iter().enumerate() {
            let top = y + PANEL_HEAD + ROW * index as f64;
            let colour = if is_distlock(&row.contender) {
                "#2b6cb0"
            } else {
                "#a0aec0"
            };
            let label = escape(&row.contender);
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#,
                ops_x - 8.0,
                top + BAR - 2.0
            );
            for (class, x, value, max, text) in [
                (
                    "ops",
                    ops_x,
                    row.ops_per_sec,
                    max_ops,
                    thousands(row.ops_per_sec),
                ),
                (
                    "p99",
                    p99_x,
                    row.p99_us,
                    max_p99,
                    format!("{:.1}", row.p99_us),
                ),
            ] {
                let width = bar_length(value, max);
                let _ = writeln!(
                    out,
                    r##"<rect class="{class}" data-row="{label}" x="{x}" y="{top}" width="{width:.2}" height="{BAR}" fill="{colour}"><title>{} {label}: {text}</title></rect><text x="{:.2}" y="{}" fill="#2d3748">{text}</text>"##,
                    escape(workload),
                    x + width + 4.0,
                    top + BAR - 2.0
                );
            }
        }
        let _ = writeln!(out, "</g>");
        y += panel_height(panel.len());
    }
    out.push_str("</svg>\n");
    out
}

/// `value` as a share of the chart's width, `max` filling it (0 for nothing or no scale).
fn bar_length(value: f64, max: f64) -> f64 {
    if max > 0.0 && value.is_finite() && value > 0.0 {
        CHART * (value / max).min(1.0)
    } else {
        0.0
    }
}

/// A whole number with thousands separators (`193,917`), for the ops/s labels.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if value < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, contender: &str, ops: f64, p99: f64) -> PlotRow {
        PlotRow {
            workload: workload.to_owned(),
            contender: contender.to_owned(),
            ops_per_sec: ops,
            p99_us: p99,
        }
    }

    /// `(class, data-row, width)` of every bar of `workload`'s panel.
    fn bars(doc: &roxmltree::Document<'_>, workload: &str) -> Vec<(String, String, f64)> {
        let panel = doc
            .descendants()
            .find(|node| node.attribute("data-workload") == Some(workload))
            .unwrap_or_else(|| panic!("no panel {workload}"));
        panel
            .descendants()
            .filter(|node| node.has_tag_name("rect") && node.attribute("data-row").is_some())
            .map(|node| {
                (
                    node.attribute("class").unwrap_or_default().to_owned(),
                    node.attribute("data-row").unwrap_or_default().to_owned(),
                    node.attribute("width").unwrap_or_default().parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn well_formed_with_every_label_and_proportional_bars() {
        let rows = [
            row("W1", "ping2", 8000.0, 200.0),
            row("W1", "distlock-fixed", 4000.0, 400.0),
            row("W2", "raw-script", 50_000.0, 3000.0),
            row("W2", "distlock <&> \"fast\"", 25_000.0, 1500.0),
        ];
        let text = svg("lockbench <run> & more", &rows);
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        for r in &rows {
            assert!(
                texts.contains(&r.contender.as_str()),
                "{}: {text}",
                r.contender
            );
        }
        assert!(texts.contains(&"lockbench <run> & more"));
        assert!(!text.contains("<run>") && !text.contains("<&>"), "{text}");

        let w1 = bars(&doc, "W1");
        assert_eq!(
            w1,
            [
                ("ops".to_owned(), "ping2".to_owned(), CHART),
                ("p99".to_owned(), "ping2".to_owned(), CHART / 2.0),
                ("ops".to_owned(), "distlock-fixed".to_owned(), CHART / 2.0),
                ("p99".to_owned(), "distlock-fixed".to_owned(), CHART),
            ]
        );
        // Each panel has its own scale: W2's longest bars fill the chart too.
        let w2 = bars(&doc, "W2");
        assert_eq!(w2.len(), 4);
        assert_eq!(w2[0].2, CHART);
        assert_eq!(w2[2].2, CHART / 2.0);
        assert_eq!(w2[2].1, "distlock <&> \"fast\"");
    }

    #[test]
    fn reads_the_rows_of_a_json_file() {
        let json = r#"{"url": null, "results": [
            {"workload":"W1","contender":"ping2","round":1,"ops_per_sec":10.0,"p99_us":1.5},
            {"workload":"W1","contender":"ping2","round":2,"ops_per_sec":30.0,"p99_us":0.5}],
            "medians": [{"workload":"W1","contender":"ping2","round":2,"ops_per_sec":30.0,"p99_us":0.5}]}"#;
        assert_eq!(
            rows_from_json(json).expect("rows"),
            [row("W1", "ping2", 30.0, 0.5)]
        );
        let results_only =
            r#"{"results": [{"workload":"W2","contender":"x","ops_per_sec":1,"p99_us":2}]}"#;
        assert_eq!(
            rows_from_json(results_only).expect("rows"),
            [row("W2", "x", 1.0, 2.0)]
        );
        assert!(rows_from_json("{}").is_err());
        assert!(rows_from_json(r#"{"medians": [{"workload":"W1"}]}"#).is_err());
        assert!(rows_from_json("not json").is_err());
    }

    #[test]
    fn docs_json_files_plot() {
        for file in [
            "performance.json",
            "performance-cluster.json",
            "performance-semaphore.json",
            "performance-rwlock.json",
            "performance-fair.json",
        ] {
            let path = format!("{}/../docs/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).expect("docs JSON");
            let rows = rows_from_json(&text).expect("rows");
            assert!(!rows.is_empty(), "{file}");
            roxmltree::Document::parse(&svg(file, &rows)).expect("well-formed");
        }
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(193_917.4), "193,917");
        assert_eq!(thousands(84.0), "84");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(-1234.0), "-1,234");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
    }
}
