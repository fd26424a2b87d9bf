//! The overview's chart: webhooks per minute by outcome, as an SVG of stacked bars drawn
//! on the server (no chart library, no script). Numbers only reach the markup.

use crate::observability::TrafficCounts;
use maud::{html, Markup};

/// The outcome groups drawn, bottom to top, with their CSS class.
pub const GROUPS: [&str; 4] = ["accepted", "duplicate_fact", "replayed", "rejected"];

/// Which group an outcome label is drawn in.
pub fn group_of(outcome: &str) -> &'static str {
    match outcome {
        "accepted" => "accepted",
        "duplicate_fact" | "duplicate_after_expiry" => "duplicate_fact",
        "replayed" | "handshake" => "replayed",
        _ => "rejected",
    }
}

const WIDTH: u32 = 720;
const HEIGHT: u32 = 160;
const LEFT: u32 = 40;

/// `minutes` consecutive minutes ending with `last_minute` (Unix minutes), from the
/// recorded traffic.
pub fn per_minute(traffic: &[(i64, TrafficCounts)], last_minute: i64, minutes: i64) -> Markup {
    let columns: Vec<[u64; 4]> = (last_minute - minutes + 1..=last_minute)
        .map(|minute| column(traffic, minute))
        .collect();
    let peak = columns
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = f64::from(WIDTH - LEFT) / columns.len().max(1) as f64;
    let scale = f64::from(HEIGHT - 20) / peak as f64;
    let bars = bars(&columns, slot, scale);
    html! {
        svg.chart viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
            aria-label={ "Webhooks per minute over the last " (minutes) " minutes, at most " (peak) } {
            text.axis x="0" y="12" { (peak) }
            text.axis x="0" y=(HEIGHT - 2) { "0" }
            line.axis x1=(LEFT) y1=(HEIGHT - 10) x2=(WIDTH) y2=(HEIGHT - 10) {}
            @for bar in &bars {
                rect class=(bar.group) x=(format!("{:.1}", bar.x)) y=(format!("{:.1}", bar.y))
                    width=(format!("{:.1}", bar.width)) height=(format!("{:.1}", bar.height)) {
                    title { (bar.count) " " (bar.group) }
                }
            }
        }
    }
}

/// One coloured piece of a column.
struct Bar {
    group: &'static str,
    count: u64,
    x: f64,
    y: f64,
    width: f64,
    height: f64,
}

/// The pieces of every column, stacked from the axis up.
fn bars(columns: &[[u64; 4]], slot: f64, scale: f64) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (i, counts) in columns.iter().enumerate() {
        let x = f64::from(LEFT) + slot * i as f64;
        let mut base = f64::from(HEIGHT - 10);
        for (group, &count) in GROUPS.iter().zip(counts).filter(|(_, c)| **c > 0) {
            let height = count as f64 * scale;
            base -= height;
            bars.push(Bar {
                group,
                count,
                x,
                y: base,
                width: (slot - 1.0).max(1.0),
                height,
            });
        }
    }
    bars
}

/// One minute's counts per group.
fn column(traffic: &[(i64, TrafficCounts)], minute: i64) -> [u64; 4] {
    let mut counts = [0u64; 4];
    if let Some((_, recorded)) = traffic.iter().find(|(m, _)| *m == minute) {
        for ((_, outcome), count) in recorded {
            if let Some(i) = GROUPS.iter().position(|g| *g == group_of(outcome)) {
                counts[i] += count;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_per_minute_and_scale_to_the_peak() {
        let mut counts = TrafficCounts::new();
        counts.insert(("stripe".to_owned(), "accepted"), 3);
        counts.insert(("stripe".to_owned(), "bad_signature"), 1);
        let svg = per_minute(&[(100, counts)], 101, 2).into_string();
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert!(svg.contains("at most 4"), "{svg}");
        assert!(svg.contains("class=\"rejected\""));
        assert_eq!(group_of("invalid_body"), "rejected");
    }
}
