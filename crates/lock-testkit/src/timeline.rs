//! Timeline pictures: lanes of bars on a time axis in milliseconds, as one self-contained SVG
//! file under the workspace's `target/distlock-timelines/`.
//!
//! This file only draws and places files; what goes into a picture (which holds, which
//! overlaps) is decided by the history checker above it. The SVG is built from plain strings
//! with every text escaped: a plotting crate would bring far more than a few rectangles need.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// One hold drawn as a bar on its lane, from `start_ms` to `end_ms`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bar {
    /// Index into [`Timeline::lanes`].
    pub lane: usize,
    pub start_ms: f64,
    pub end_ms: f64,
    /// Part of a violation (drawn with a red outline).
    pub overlapping: bool,
    /// The guard reported its lease lost (drawn hatched).
    pub lost: bool,
    /// Shown when hovering the bar.
    pub tooltip: String,
}

/// A write to the protected resource, marked on its holder's lane.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mark {
    pub lane: usize,
    pub at_ms: f64,
    /// Accepted (a dot) or refused by the fence (a cross).
    pub accepted: bool,
    pub tooltip: String,
}

/// A stretch of time drawn across every lane (two owners holding the lock at once).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    pub start_ms: f64,
    pub end_ms: f64,
    pub label: String,
}

/// Everything one picture shows; times are milliseconds on one common origin.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Timeline {
    pub title: String,
    /// A line under the title (what was found).
    pub subtitle: String,
    /// Lane labels, top to bottom, and their hover texts.
    pub lanes: Vec<(String, String)>,
    pub bars: Vec<Bar>,
    pub marks: Vec<Mark>,
    pub spans: Vec<Span>,
    /// The time range drawn; bars reaching outside it are cut at its edges.
    pub from_ms: f64,
    pub to_ms: f64,
}

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 230.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 92.0;
const LANE: f64 = 22.0;
const BAR: f64 = 12.0;
const AXIS: f64 = 40.0;

const HOLD: &str = "#4c78a8";
const VIOLATION: &str = "#d62728";
const ACCEPTED: &str = "#2ca02c";

impl Timeline {
    /// The picture as an SVG document.
    pub(crate) fn svg(&self) -> String {
        let height = TOP + LANE * self.lanes.len().max(1) as f64 + AXIS;
        let plot = WIDTH - LEFT - RIGHT;
        let span = (self.to_ms - self.from_ms).max(1e-6);
        let x = |ms: f64| LEFT + plot * ((ms - self.from_ms) / span).clamp(0.0, 1.0);
        let lane_top = |lane: usize| TOP + LANE * lane as f64;
        let bottom = lane_top(self.lanes.len().max(1));

        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        let _ = writeln!(
            out,
            r##"<defs><pattern id="lost" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="{HOLD}" fill-opacity="0.35"/><line x1="0" y1="0" x2="0" y2="6" stroke="{HOLD}" stroke-width="3"/></pattern></defs>"##
        );
        let _ = writeln!(
            out,
            r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="12" y="20" font-size="14" font-weight="bold">{}</text><text x="12" y="38">{}</text>"#,
            escape(&self.title),
            escape(&self.subtitle)
        );
        self.legend(&mut out);

        // Lanes, their labels, and vertical grid lines with the axis below.
        for (lane, (label, tooltip)) in self.lanes.iter().enumerate() {
            let top = lane_top(lane);
            if lane % 2 == 0 {
                let _ = writeln!(
                    out,
                    r##"<rect x="{LEFT}" y="{top}" width="{plot}" height="{LANE}" fill="#f4f6f8"/>"##
                );
            }
            let _ = writeln!(
                out,
                r#"<text class="lane" x="{}" y="{}" text-anchor="end">{}<title>{}</title></text>"#,
                LEFT - 8.0,
                top + LANE / 2.0 + 4.0,
                escape(label),
                escape(tooltip)
            );
        }
        let step = tick_step(span);
        let mut tick = (self.from_ms / step).ceil() * step;
        while tick <= self.to_ms + step * 1e-9 {
            let at = x(tick);
            let _ = writeln!(
                out,
                r##"<line x1="{at:.2}" y1="{TOP}" x2="{at:.2}" y2="{bottom}" stroke="#d0d7de" stroke-width="0.5"/><text class="tick" x="{at:.2}" y="{}" text-anchor="middle" fill="#57606a">{}</text>"##,
                bottom + 14.0,
                tick_label(tick, step)
            );
            tick += step;
        }
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#57606a"/><text x="{}" y="{}" text-anchor="middle" fill="#57606a">time, ms (since the history's first acquisition)</text>"##,
            LEFT + plot,
            LEFT + plot / 2.0,
            bottom + 32.0
        );

        // The overlaps, behind the bars, across every lane.
        for span_ in &self.spans {
            let (left, right) = (x(span_.start_ms), x(span_.end_ms));
            let _ = writeln!(
                out,
                r#"<rect class="overlap" x="{left:.2}" y="{TOP}" width="{:.2}" height="{:.2}" fill="{VIOLATION}" fill-opacity="0.18" stroke="{VIOLATION}" stroke-width="0.5"><title>{}</title></rect><text x="{left:.2}" y="{}" fill="{VIOLATION}" font-size="10">{}</text>"#,
                (right - left).max(1.0),
                bottom - TOP,
                escape(&span_.label),
                TOP - 3.0,
                escape(&span_.label)
            );
        }
        for bar in &self.bars {
            let (left, right) = (x(bar.start_ms), x(bar.end_ms));
            let top = lane_top(bar.lane) + (LANE - BAR) / 2.0;
            let fill = if bar.lost { "url(#lost)" } else { HOLD };
            let stroke = if bar.overlapping {
                format!(r#" stroke="{VIOLATION}" stroke-width="2""#)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                r#"<rect class="hold" x="{left:.2}" y="{top}" width="{:.2}" height="{BAR}" fill="{fill}"{stroke}><title>{}</title></rect>"#,
                (right - left).max(1.0),
                escape(&bar.tooltip)
            );
        }
        for mark in &self.marks {
            let (cx, cy) = (x(mark.at_ms), lane_top(mark.lane) + LANE / 2.0);
            let tooltip = escape(&mark.tooltip);
            if mark.accepted {
                let _ = writeln!(
                    out,
                    r##"<circle class="write accepted" cx="{cx:.2}" cy="{cy}" r="4" fill="{ACCEPTED}" stroke="#ffffff"><title>{tooltip}</title></circle>"##
                );
            } else {
                let _ = writeln!(
                    out,
                    r#"<path class="write refused" d="M{:.2},{:.2}L{:.2},{:.2}M{:.2},{:.2}L{:.2},{:.2}" stroke="{VIOLATION}" stroke-width="2.5"><title>{tooltip}</title></path>"#,
                    cx - 5.0,
                    cy - 5.0,
                    cx + 5.0,
                    cy + 5.0,
                    cx - 5.0,
                    cy + 5.0,
                    cx + 5.0,
                    cy - 5.0
                );
            }
        }
        out.push_str("</svg>\n");
        out
    }

    fn legend(&self, out: &mut String) {
        let y = 56.0;
        let mut at = 12.0;
        let mut item = |out: &mut String, shape: String, text: &str| {
            out.push_str(&shape.replace("{X}", &format!("{at}")));
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}">{}</text>"#,
                at + 18.0,
                y + 10.0,
                escape(text)
            );
            at += 18.0 + 6.5 * text.len() as f64 + 20.0;
        };
        item(
            out,
            format!(r#"<rect x="{{X}}" y="{y}" width="14" height="12" fill="{HOLD}"/>"#),
            "hold (grant to release)",
        );
        item(
            out,
            format!(r#"<rect x="{{X}}" y="{y}" width="14" height="12" fill="url(#lost)"/>"#),
            "lease reported lost",
        );
        item(
            out,
            format!(
                r#"<rect x="{{X}}" y="{}" width="14" height="14" fill="{VIOLATION}" fill-opacity="0.18" stroke="{VIOLATION}"/>"#,
                y - 1.0
            ),
            "overlap of two owners",
        );
        item(
            out,
            format!(
                r#"<circle cx="{{X}}" cy="{}" r="4" fill="{ACCEPTED}" transform="translate(7 0)"/>"#,
                y + 6.0
            ),
            "write accepted",
        );
        item(
            out,
            format!(
                r#"<path d="M0,0L10,10M0,10L10,0" stroke="{VIOLATION}" stroke-width="2.5" transform="translate({{X}} {})"/>"#,
                y + 1.0
            ),
            "write refused by the fence",
        );
    }
}

/// A grid step of 1, 2 or 5 × 10^k ms giving 5 to 12 lines over `span` ms.
fn tick_step(span: f64) -> f64 {
    let rough = span / 8.0;
    let power = 10_f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

/// A tick's label with as many decimals as its step needs.
fn tick_label(ms: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{ms:.decimals$}")
}

/// `text` safe inside an XML element or a double-quoted attribute (control characters XML 1.0
/// does not allow become `?`): for the timeline pictures and `lockbench --plot`'s.
///
/// ```
/// assert_eq!(lock_testkit::xml_escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// The directory pictures go to: `distlock-timelines/` in the cargo target directory of the
/// running test (`CARGO_TARGET_DIR`; else the directory above the test binary that holds
/// cargo's `CACHEDIR.TAG`; else `target/` next to the `Cargo.lock` above `CARGO_MANIFEST_DIR` or
/// the current directory), or in the system's temp directory when none is found.
pub(crate) fn output_dir() -> PathBuf {
    target_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("distlock-timelines")
}

fn target_dir() -> Option<PathBuf> {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    find_target_dir(
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from),
        std::env::current_exe().ok(),
        start,
    )
}

/// [`target_dir`] from its inputs: `CARGO_TARGET_DIR`, the running executable, and the
/// directory to walk up from to the workspace's `Cargo.lock`.
fn find_target_dir(
    cargo_target_dir: Option<PathBuf>,
    exe: Option<PathBuf>,
    start: Option<PathBuf>,
) -> Option<PathBuf> {
    // A relative CARGO_TARGET_DIR is relative to where cargo ran, which a test does not know.
    if let Some(dir) = cargo_target_dir
        && dir.is_absolute()
    {
        return Some(dir);
    }
    // Test binaries live in `<target>/<profile>/deps/` (or `<target>/<triple>/<profile>/deps/`),
    // and cargo marks `<target>` with a CACHEDIR.TAG.
    if let Some(dir) = exe.as_deref().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
    }) {
        return Some(dir.to_path_buf());
    }
    start?
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .map(|dir| dir.join("target"))
}

/// Writes `svg` as `<dir>/<name>-<n>.svg`, `n` counting this process's pictures of `name` from
/// 1 (a rerun overwrites the pictures of the run before), and returns the path.
pub(crate) fn write(dir: &Path, name: &str, svg: &str) -> io::Result<PathBuf> {
    static COUNTS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);
    let name = file_name(name);
    let n = {
        let mut counts = COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts
            .get_or_insert_with(HashMap::new)
            .entry(name.clone())
            .or_insert(0);
        *count += 1;
        *count
    };
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}-{n}.svg"));
    std::fs::write(&path, svg)?;
    Ok(path)
}

/// `name` as a file name: a test's path (`tests::name`) with `-` for `::`, and `_` for anything
/// but ASCII letters, digits, `-`, `_` and `.`.
fn file_name(name: &str) -> String {
    let name: String = name
        .replace("::", "-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        format!("history{name}")
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture() -> Timeline {
        Timeline {
            title: "a <title> & more".to_owned(),
            subtitle: "1 overlap".to_owned(),
            lanes: vec![
                ("w0 a<b".to_owned(), "owner a<b".to_owned()),
                ("w1 c&d".to_owned(), "owner c&d".to_owned()),
            ],
            bars: vec![
                Bar {
                    lane: 0,
                    start_ms: 0.0,
                    end_ms: 50.0,
                    overlapping: true,
                    lost: false,
                    tooltip: "a".to_owned(),
                },
                Bar {
                    lane: 1,
                    start_ms: 25.0,
                    end_ms: 150.0, // cut at the window's end
                    overlapping: true,
                    lost: true,
                    tooltip: "c".to_owned(),
                },
            ],
            marks: vec![
                Mark {
                    lane: 0,
                    at_ms: 40.0,
                    accepted: false,
                    tooltip: "refused".to_owned(),
                },
                Mark {
                    lane: 1,
                    at_ms: 30.0,
                    accepted: true,
                    tooltip: "accepted".to_owned(),
                },
            ],
            spans: vec![Span {
                start_ms: 25.0,
                end_ms: 50.0,
                label: "overlap 1".to_owned(),
            }],
            from_ms: 0.0,
            to_ms: 100.0,
        }
    }

    fn number(node: roxmltree::Node<'_, '_>, name: &str) -> f64 {
        node.attribute(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .parse()
            .expect("a number")
    }

    #[test]
    fn draws_lanes_bars_overlaps_and_writes() {
        let text = picture().svg();
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let by_class = |class: &str| -> Vec<roxmltree::Node<'_, '_>> {
            doc.descendants()
                .filter(|node| node.attribute("class") == Some(class))
                .collect()
        };
        let lanes: Vec<&str> = by_class("lane")
            .iter()
            .filter_map(|node| node.text())
            .collect();
        assert_eq!(lanes, ["w0 a<b", "w1 c&d"]);
        assert!(
            !text.contains("a<b") && !text.contains("<title> &"),
            "{text}"
        );

        let plot = WIDTH - LEFT - RIGHT;
        let holds = by_class("hold");
        assert_eq!(holds.len(), 2);
        assert_eq!(number(holds[0], "x"), LEFT);
        assert!((number(holds[0], "width") - plot / 2.0).abs() < 0.01);
        // Cut at the window's end: from 25 % to the right edge.
        assert!((number(holds[1], "x") - (LEFT + plot / 4.0)).abs() < 0.01);
        assert!((number(holds[1], "width") - plot * 0.75).abs() < 0.01);
        assert_eq!(holds[0].attribute("stroke"), Some(VIOLATION));
        assert_eq!(holds[1].attribute("fill"), Some("url(#lost)"));

        let overlap = by_class("overlap");
        assert_eq!(overlap.len(), 1);
        assert!((number(overlap[0], "x") - (LEFT + plot / 4.0)).abs() < 0.01);
        assert!((number(overlap[0], "width") - plot / 4.0).abs() < 0.01);
        assert_eq!(by_class("write accepted").len(), 1);
        assert_eq!(by_class("write refused").len(), 1);

        // The axis: ticks every 20 ms from 0 to 100.
        let ticks: Vec<&str> = by_class("tick")
            .iter()
            .filter_map(|node| node.text())
            .collect();
        assert_eq!(ticks, ["0", "20", "40", "60", "80", "100"]);
    }

    #[test]
    fn ticks_and_names() {
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(3.0), 0.5);
        assert_eq!(tick_label(1.5, 0.5), "1.5");
        assert_eq!(tick_label(40.0, 20.0), "40");
        assert_eq!(file_name("tests::a b/c"), "tests-a_b_c");
        assert_eq!(file_name(""), "history");
        assert_eq!(file_name("../x"), "history.._x");
        assert_eq!(escape("<a & \"b\">\u{1}"), "&lt;a &amp; &quot;b&quot;&gt;?");
    }

    #[test]
    fn finds_the_target_directory() {
        let root = tempfile::tempdir().expect("temp dir");
        let workspace = root.path().join("ws");
        let target = root.path().join("elsewhere/target");
        let deps = target.join("x86_64-unknown-linux-gnu/debug/deps");
        std::fs::create_dir_all(&deps).expect("dirs");
        std::fs::create_dir_all(workspace.join("crates/a")).expect("dirs");
        std::fs::write(target.join("CACHEDIR.TAG"), "").expect("tag");
        std::fs::write(workspace.join("Cargo.lock"), "").expect("lock");
        let exe = Some(deps.join("canaries-0123"));
        let start = Some(workspace.join("crates/a"));
        let given = PathBuf::from("/given/target");

        let found = |env: Option<&Path>, exe: &Option<PathBuf>| {
            find_target_dir(env.map(Path::to_path_buf), exe.clone(), start.clone())
        };
        assert_eq!(found(Some(&given), &exe), Some(given.clone()));
        // A relative CARGO_TARGET_DIR is skipped; the executable's CACHEDIR.TAG wins.
        assert_eq!(found(Some(Path::new("rel")), &exe), Some(target.clone()));
        // No tag above the executable: the Cargo.lock above the start.
        let untagged = Some(root.path().join("bin/tool"));
        assert_eq!(found(None, &untagged), Some(workspace.join("target")));
        assert_eq!(find_target_dir(None, None, None), None);
    }

    #[test]
    fn numbers_the_files_of_a_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = write(dir.path(), "numbered", "<svg/>").expect("written");
        let second = write(dir.path(), "numbered", "<svg/>").expect("written");
        assert_eq!(first, dir.path().join("numbered-1.svg"));
        assert_eq!(second, dir.path().join("numbered-2.svg"));
        assert_eq!(std::fs::read_to_string(second).expect("read"), "<svg/>");
    }
}
