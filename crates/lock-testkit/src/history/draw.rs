//! The drawings: how a [`Report`] is shown. Its `Display` is the one-paragraph text a failing
//! test prints; [`write_timeline`] draws the holds around the first violations as an SVG
//! timeline (one lane per owner, the overlaps highlighted, writes marked as accepted or
//! refused) and writes it under `target/distlock-timelines/`.
//!
//! Apart from the checker because it decides nothing: it only lays out what the checker found,
//! and the checker asks for a picture only when there is a violation to show.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::record::{Hold, WriteStatus};
use super::report::{DEFAULT_MAX_EXAMPLES, Report};
use crate::timeline::{self, Bar, Mark, Span, Timeline};

/// At most this many holds are drawn in a [`Report::timeline`] picture.
pub const MAX_TIMELINE_HOLDS: usize = 300;

/// Draws the holds around the first violations ([`picture`]) and writes the picture as
/// `<name>-<n>.svg` under `target/distlock-timelines/`, else in the temporary directory. `None`,
/// with a line on stderr saying why, when it could not be written.
pub(super) fn write_timeline(
    holds: &[Hold],
    order: &[usize],
    report: &Report,
    name: &str,
) -> Option<PathBuf> {
    let svg = picture(holds, order, report, name).svg();
    // Under target/ when it can be written, else in the temporary directory.
    let written = timeline::write(&timeline::output_dir(), name, &svg).or_else(|error| {
        eprintln!("history: the timeline of {name} could not go under target/: {error}");
        timeline::write(&std::env::temp_dir().join("distlock-timelines"), name, &svg)
    });
    match written {
        Ok(path) => Some(path),
        Err(error) => {
            eprintln!("history: the timeline of {name} was not written: {error}");
            None
        }
    }
}

/// The timeline of the holds around the first violations: the two holds of each of the first
/// overlap examples (as many examples as fit in [`MAX_TIMELINE_HOLDS`] holds), else the first
/// holds whose write the fence refused, else (lost updates alone) the whole history; with a
/// margin of a quarter of that on both sides.
fn picture(holds: &[Hold], order: &[usize], report: &Report, name: &str) -> Timeline {
    let Some(origin) = report.start else {
        return Timeline::default();
    };
    let ms = |at: Instant| at.saturating_duration_since(origin).as_secs_f64() * 1e3;
    let padded = |(from, to): (f64, f64)| {
        let margin = ((to - from) * 0.25).max(1.0);
        (from - margin, to + margin)
    };
    let within =
        |(from, to): (f64, f64), hold: &Hold| ms(hold.acquired_at) <= to && ms(hold.end()) >= from;
    let count_within = |window| holds.iter().filter(|h| within(window, h)).count();

    let focus: Vec<(f64, f64)> = if report.overlap_examples.is_empty() {
        let refused: Vec<(f64, f64)> = order
            .iter()
            .map(|&i| &holds[i])
            .filter(|h| h.write == Some(WriteStatus::Rejected))
            .take(DEFAULT_MAX_EXAMPLES)
            .map(|h| (ms(h.acquired_at), ms(h.end())))
            .collect();
        if refused.is_empty() {
            let last = holds.iter().map(|h| ms(h.end())).fold(0.0, f64::max);
            vec![(0.0, last)]
        } else {
            refused
        }
    } else {
        report
            .overlap_examples
            .iter()
            .map(|o| {
                (
                    ms(o.earlier.acquired_at),
                    ms(o.earlier.end().max(o.later.end())),
                )
            })
            .collect()
    };
    // The first focus always; each next one while the window still holds few enough holds.
    let mut core = focus[0];
    for &(from, to) in &focus[1..] {
        let grown = (core.0.min(from), core.1.max(to));
        if count_within(padded(grown)) > MAX_TIMELINE_HOLDS {
            break;
        }
        core = grown;
    }
    let window = padded(core);
    let centre = (core.0 + core.1) / 2.0;
    let mut shown: Vec<&Hold> = order
        .iter()
        .map(|&i| &holds[i])
        .filter(|h| within(window, h))
        .collect();
    let in_window = shown.len();
    if shown.len() > MAX_TIMELINE_HOLDS {
        // The holds nearest the violations' middle, then back in acquisition order.
        let distance = |h: &Hold| {
            let (from, to) = (ms(h.acquired_at), ms(h.end()));
            if from <= centre && centre <= to {
                0.0
            } else {
                (from - centre).abs().min((to - centre).abs())
            }
        };
        shown.sort_by(|a, b| distance(a).total_cmp(&distance(b)));
        shown.truncate(MAX_TIMELINE_HOLDS);
        shown.sort_by_key(|h| (h.acquired_at, h.end()));
    }

    let mut lanes: Vec<(String, String)> = Vec::new();
    let mut lane_of: HashMap<&str, usize> = HashMap::new();
    for hold in &shown {
        if !lane_of.contains_key(hold.owner.as_str()) {
            lane_of.insert(&hold.owner, lanes.len());
            lanes.push((
                format!("worker {} · {}", hold.worker, short(&hold.owner)),
                format!("owner {} (worker {})", hold.owner, hold.worker),
            ));
        }
    }
    // Every stretch where two shown holds of different owners are both held, merged.
    let mut both: Vec<(f64, f64)> = Vec::new();
    let mut overlapping = vec![false; shown.len()];
    for (a, first) in shown.iter().enumerate() {
        for (b, second) in shown.iter().enumerate().skip(a + 1) {
            let from = first.acquired_at.max(second.acquired_at);
            let to = first.end().min(second.end());
            if first.owner != second.owner && from < to {
                both.push((ms(from), ms(to)));
                overlapping[a] = true;
                overlapping[b] = true;
            }
        }
    }
    both.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut spans: Vec<Span> = Vec::new();
    for (from, to) in both {
        match spans.last_mut() {
            Some(last) if from <= last.end_ms => last.end_ms = last.end_ms.max(to),
            _ => spans.push(Span {
                start_ms: from,
                end_ms: to,
                label: String::new(),
            }),
        }
    }
    for (n, span) in spans.iter_mut().enumerate() {
        span.label = format!("overlap {} ({:.3} ms)", n + 1, span.end_ms - span.start_ms);
    }

    let describe = |hold: &Hold| {
        let mut text = format!(
            "worker {}, owner {}, +{:.3} ms to +{:.3} ms",
            hold.worker,
            hold.owner,
            ms(hold.acquired_at),
            ms(hold.end())
        );
        if let Some(token) = hold.token {
            text.push_str(&format!(", token {token}"));
        }
        if hold.lost_signal {
            text.push_str(", lease reported lost");
        }
        text
    };
    let bars = shown
        .iter()
        .zip(&overlapping)
        .map(|(hold, &overlapping)| Bar {
            lane: lane_of[hold.owner.as_str()],
            start_ms: ms(hold.acquired_at),
            end_ms: ms(hold.end()),
            overlapping,
            lost: hold.lost_signal,
            tooltip: describe(hold),
        })
        .collect();
    let marks = shown
        .iter()
        .filter_map(|hold| {
            let write = hold.write?;
            let at = ms(hold.write_time());
            let accepted = write == WriteStatus::Accepted;
            let verdict = if accepted {
                "accepted"
            } else {
                "refused by the fence"
            };
            Some(Mark {
                lane: lane_of[hold.owner.as_str()],
                at_ms: at,
                accepted,
                tooltip: format!("write at +{at:.3} ms {verdict}: {}", describe(hold)),
            })
        })
        .collect();
    let subtitle = format!(
        "{} overlapping pairs, {} writes refused by the fence, {} lost updates in {} holds; \
         shown: {} holds from +{:.1} ms to +{:.1} ms{}",
        report.overlaps,
        report.fence_rejections,
        report.lost_updates,
        report.acquisitions,
        shown.len(),
        window.0.max(0.0),
        window.1,
        if in_window > shown.len() {
            format!(" (the {} nearest of {in_window})", shown.len())
        } else {
            String::new()
        }
    );
    Timeline {
        title: format!("{name}: holds around the first violation"),
        subtitle,
        lanes,
        bars,
        marks,
        spans,
        from_ms: window.0.max(0.0),
        to_ms: window.1.max(window.0.max(0.0) + 1e-3),
    }
}

/// An owner id short enough for a lane label: its start and end around an ellipsis.
fn short(owner: &str) -> String {
    let chars: Vec<char> = owner.chars().collect();
    if chars.len() <= 24 {
        owner.to_owned()
    } else {
        let head: String = chars[..8].iter().collect();
        let tail: String = chars[chars.len() - 12..].iter().collect();
        format!("{head}…{tail}")
    }
}

/// A duration with about four significant digits and a unit.
struct Short(Duration);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        if secs >= 1.0 {
            write!(f, "{secs:.3}s")
        } else if secs >= 1e-3 {
            write!(f, "{:.3}ms", secs * 1e3)
        } else {
            write!(f, "{:.1}µs", secs * 1e6)
        }
    }
}

impl Report {
    fn offset(&self, at: Instant) -> Short {
        Short(self.start.map_or(Duration::ZERO, |start| at - start))
    }

    fn fmt_hold(&self, f: &mut fmt::Formatter<'_>, hold: &Hold) -> fmt::Result {
        write!(f, "worker {} (owner {}", hold.worker, hold.owner)?;
        if let Some(token) = hold.token {
            write!(f, ", token {token}")?;
        }
        write!(
            f,
            ") [+{}, +{}]",
            self.offset(hold.acquired_at),
            self.offset(hold.end())
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} acquisitions by {} workers ({} owners); {} overlapping pairs of different owners; \
             {} accepted writes, {} fence rejections; resource grew by {}, so {} lost updates",
            self.acquisitions,
            self.workers,
            self.owners,
            self.overlaps,
            self.accepted_writes,
            self.fence_rejections,
            self.observed_increase,
            self.lost_updates,
        )?;
        if self.lost_updates < 0 {
            f.write_str(" (negative: writes missing from the history)")?;
        }
        match self.stale_writes_rejected_ratio {
            Some(ratio) => write!(
                f,
                "; {} stale writes, {} rejected ({:.1}%)",
                self.stale_writes,
                self.stale_writes_rejected,
                ratio * 100.0
            )?,
            None => f.write_str("; no stale writes")?,
        }
        write!(f, "; {} lost-lease signals", self.lost_signals)?;
        if let Some(wait) = &self.wait {
            write!(
                f,
                "; wait p50 {} p99 {} max {}",
                Short(wait.p50),
                Short(wait.p99),
                Short(wait.max)
            )?;
            if let Some((budget, share)) = wait.within_budget {
                write!(f, ", {:.1}% within {}", share * 100.0, Short(budget))?;
            }
        }
        for (n, overlap) in self.overlap_examples.iter().enumerate() {
            write!(f, "{} ", if n == 0 { ". Overlaps:" } else { ";" })?;
            self.fmt_hold(f, &overlap.earlier)?;
            f.write_str(" and ")?;
            self.fmt_hold(f, &overlap.later)?;
            write!(f, " for {}", Short(overlap.duration))?;
        }
        f.write_str(".")?;
        if let Some(path) = &self.timeline {
            write!(f, " Timeline: {}", path.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_holds::{hold, ms};
    use crate::history::{CheckOptions, check};

    /// The `class`es of the SVG's elements, and the texts of the elements of class `class`.
    fn svg_texts(text: &str, class: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(text).expect("well-formed XML");
        doc.descendants()
            .filter(|node| node.attribute("class") == Some(class))
            .map(|node| node.text().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn a_violation_leaves_a_timeline() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a<&", 0, 10).with_write(WriteStatus::Rejected, Some(t0 + ms(9))),
            hold(t0, 1, "b", 8, 20).with_lost_signal(true),
            hold(t0, 2, "c", 20, 30),
        ];
        let options = CheckOptions::new().timeline_name("history unit::overlap");
        let report = check(&holds, 2, 0, &options);
        assert_eq!(report.overlaps, 1);
        let path = report.timeline.clone().expect("a timeline");
        assert!(
            path.ends_with("distlock-timelines/history_unit-overlap-1.svg"),
            "{}",
            path.display()
        );
        assert!(
            report
                .to_string()
                .contains(&format!("Timeline: {}", path.display()))
        );
        let text = std::fs::read_to_string(&path).expect("the timeline");
        let lanes = svg_texts(&text, "lane");
        assert_eq!(lanes, ["worker 0 · a<&", "worker 1 · b", "worker 2 · c"]);
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let holds_drawn: Vec<_> = doc
            .descendants()
            .filter(|node| node.attribute("class") == Some("hold"))
            .collect();
        assert_eq!(holds_drawn.len(), 3);
        // a and b overlap (outlined), c touches b only.
        let outlined: Vec<bool> = holds_drawn
            .iter()
            .map(|node| node.attribute("stroke").is_some())
            .collect();
        assert_eq!(outlined, [true, true, false]);
        assert_eq!(holds_drawn[1].attribute("fill"), Some("url(#lost)"));
        assert_eq!(svg_texts(&text, "overlap").len(), 1);
        assert_eq!(svg_texts(&text, "write refused").len(), 1);
        assert_eq!(svg_texts(&text, "write accepted").len(), 2);

        // Clean, or turned off: no picture.
        assert_eq!(check(&holds[2..], 1, 0, &options).timeline, None);
        let off = CheckOptions::new().without_timeline();
        assert_eq!(check(&holds, 2, 0, &off).timeline, None);
    }

    #[test]
    fn the_timeline_is_bounded_around_the_first_violation() {
        let t0 = Instant::now();
        // 10,000 back-to-back holds of 1 ms, two owners taking turns; at 6,000 ms a third owner
        // takes the lock for 0.5 ms inside a hold of "a".
        let mut holds: Vec<Hold> = (0..10_000)
            .map(|n| hold(t0, n as usize % 2, ["a", "b"][n as usize % 2], n, n + 1))
            .collect();
        holds.push(
            Hold::new(
                7,
                "intruder",
                None,
                t0 + Duration::from_micros(6_000_200),
                t0 + Duration::from_micros(6_000_700),
            )
            .with_write(WriteStatus::Rejected, None),
        );
        let report = check(&holds, 10_000, 0, &CheckOptions::new().without_timeline());
        assert_eq!(report.overlaps, 1);
        let text = picture(&holds, &sorted(&holds), &report, "bounded").svg();
        let bars = svg_texts(&text, "hold");
        assert!(
            bars.len() <= MAX_TIMELINE_HOLDS && bars.len() >= 3,
            "{}",
            bars.len()
        );
        let lanes = svg_texts(&text, "lane");
        assert!(
            lanes.contains(&"worker 7 · intruder".to_owned()),
            "{lanes:?}"
        );
        assert_eq!(svg_texts(&text, "overlap").len(), 1);
        assert_eq!(svg_texts(&text, "write refused").len(), 1);
        // The axis is around 6,000 ms, not the whole run.
        let ticks = svg_texts(&text, "tick");
        let first: f64 = ticks[0].parse().expect("a number");
        let last: f64 = ticks[ticks.len() - 1].parse().expect("a number");
        assert!(first >= 5_990.0 && last <= 6_010.0, "{ticks:?}");

        // Far more holds in the window than can be drawn: the nearest ones are kept.
        let crowd: Vec<Hold> = (0..2_000)
            .map(|n| hold(t0, 100 + n, &format!("crowd-{n}"), 0, 100))
            .chain([hold(t0, 1, "late", 99, 200)])
            .collect();
        let report = check(&crowd, 0, 0, &CheckOptions::new().without_timeline());
        let text = picture(&crowd, &sorted(&crowd), &report, "crowd").svg();
        assert_eq!(svg_texts(&text, "hold").len(), MAX_TIMELINE_HOLDS);
    }

    /// The order `check` sorts holds in.
    fn sorted(holds: &[Hold]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..holds.len()).collect();
        order.sort_by_key(|&i| (holds[i].acquired_at, holds[i].end()));
        order
    }
}
