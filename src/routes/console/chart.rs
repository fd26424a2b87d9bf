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
const HEIGHT: u32 = 190;
const LEFT: u32 = 44;
/// The plot's bottom: below it the time labels, then the axis title.
const BASE: u32 = HEIGHT - 36;
const TOP: u32 = 14;

/// `minutes` consecutive minutes ending with `last_minute` (Unix minutes), from the
/// recorded traffic: stacked bars with a labelled count axis and time axis (UTC), and the
/// same numbers as a table beneath (readable without colour or pictures).
pub fn per_minute(traffic: &[(i64, TrafficCounts)], last_minute: i64, minutes: i64) -> Markup {
    let first_minute = last_minute - minutes + 1;
    let columns: Vec<[u64; 4]> = (first_minute..=last_minute)
        .map(|minute| column(traffic, minute))
        .collect();
    let peak = columns
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = f64::from(WIDTH - LEFT) / columns.len().max(1) as f64;
    let scale = f64::from(BASE - TOP) / peak as f64;
    let bars = bars(&columns, slot, scale);
    html! {
        svg.chart viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
            aria-label={ "Webhooks per minute over the last " (minutes) " minutes, at most " (peak) " in a minute; the table below has the numbers" } {
            (count_axis(peak, scale))
            (time_axis(first_minute, minutes, slot))
            @for bar in &bars {
                rect class=(bar.group) x=(format!("{:.1}", bar.x)) y=(format!("{:.1}", bar.y))
                    width=(format!("{:.1}", bar.width)) height=(format!("{:.1}", bar.height)) {
                    title { (bar.count) " " (bar.group) }
                }
            }
        }
        p.legend {
            @for group in GROUPS { span class={ "key " (group) } { (group) } " " }
        }
        (as_table(&columns, first_minute))
    }
}

/// The count axis: 0, half the peak and the peak, with grid lines, and its title.
fn count_axis(peak: u64, scale: f64) -> Markup {
    let ticks = [0, peak / 2, peak];
    html! {
        text.title x=(LEFT + 6) y=(TOP + 2) { "webhooks per minute" }
        @for tick in ticks {
            @let y = f64::from(BASE) - tick as f64 * scale;
            line.grid x1=(LEFT) y1=(format!("{y:.1}")) x2=(WIDTH) y2=(format!("{y:.1}")) {}
            text.axis x=(LEFT - 6) y=(format!("{:.1}", y + 4.0)) text-anchor="end" { (tick) }
        }
        line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(BASE) {}
    }
}

/// The time axis: a label every 10 minutes (HH:MM, UTC), and its title.
fn time_axis(first_minute: i64, minutes: i64, slot: f64) -> Markup {
    let labelled = (0..minutes).filter(|i| (first_minute + i).rem_euclid(10) == 0);
    html! {
        line.axis x1=(LEFT) y1=(BASE) x2=(WIDTH) y2=(BASE) {}
        @for i in labelled {
            @let x = f64::from(LEFT) + slot * i as f64;
            line.axis x1=(format!("{x:.1}")) y1=(BASE) x2=(format!("{x:.1}")) y2=(BASE + 4) {}
            text.axis x=(format!("{x:.1}")) y=(BASE + 16) text-anchor="middle" { (clock(first_minute + i)) }
        }
        text.title x=(WIDTH) y=(HEIGHT - 2) text-anchor="end" { "time (UTC)" }
    }
}

/// A Unix minute as `HH:MM`.
fn clock(minute: i64) -> String {
    chrono::DateTime::from_timestamp(minute * 60, 0)
        .map(|at| at.format("%H:%M").to_string())
        .unwrap_or_default()
}

/// The minutes with traffic, as a table: the chart's numbers without colour.
fn as_table(columns: &[[u64; 4]], first_minute: i64) -> Markup {
    let rows: Vec<(i64, &[u64; 4])> = (columns.iter().enumerate())
        .filter(|(_, counts)| counts.iter().any(|c| *c > 0))
        .map(|(i, counts)| (first_minute + i as i64, counts))
        .collect();
    html! {
        details.chart-table {
            summary { "The chart as a table (" (rows.len()) @if rows.len() == 1 { " minute" } @else { " minutes" } " with webhooks)" }
            table {
                thead { tr { th { "Minute (UTC)" } @for group in GROUPS { th.num { (group) } } } }
                tbody {
                    @for (minute, counts) in &rows {
                        tr { td { (clock(*minute)) } @for count in counts.iter() { td.num { (count) } } }
                    }
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
        let mut base = f64::from(BASE);
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
        // The axes: counts 0, 2, 4; a time label at the minute divisible by 10; the table.
        assert!(
            svg.contains(">4</text>") && svg.contains(">2</text>"),
            "{svg}"
        );
        assert!(
            svg.contains("<td>01:40</td>"),
            "minute 100 in the table: {svg}"
        );
        assert_eq!(group_of("invalid_body"), "rejected");
    }
}
