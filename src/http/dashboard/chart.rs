//! The requests-per-day chart of the usage page: an inline SVG drawn on the server (no
//! script, no external image), one stacked bar per day, sandbox below production. Colours
//! come from the stylesheet through classes; every bar has a `<title>` with its numbers.

use std::fmt::Write;

use crate::domain::usage::DayUsage;

const WIDTH: u64 = 620;
const HEIGHT: u64 = 180;
const TOP: u64 = 16;
const BOTTOM: u64 = 24;
const LEFT: u64 = 44;

/// The chart as SVG markup. Dates and numbers are the only text in it, so it needs no
/// escaping.
pub fn requests_per_day(days: &[DayUsage]) -> String {
    let max = days
        .iter()
        .map(|d| d.sandbox + d.production)
        .max()
        .unwrap_or(0)
        .max(1);
    let total: u64 = days.iter().map(|d| d.sandbox + d.production).sum();
    let plot_w = WIDTH - LEFT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / (days.len().max(1) as u64);
    let bar_w = slot.saturating_sub(2).max(1);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="chart-title"><title id="chart-title">Requests per day this month: {total} in total, at most {max} on one day</title>"#
    );
    let baseline = TOP + plot_h;
    let _ = write!(
        svg,
        r#"<line class="axis" x1="{LEFT}" y1="{baseline}" x2="{WIDTH}" y2="{baseline}"/><text class="label" x="{x}" y="{y}" text-anchor="end">{max}</text><text class="label" x="{x}" y="{baseline}" text-anchor="end">0</text>"#,
        x = LEFT - 6,
        y = TOP + 4,
    );
    for (i, day) in days.iter().enumerate() {
        let x = LEFT + i as u64 * slot + 1;
        let sandbox_h = day.sandbox * plot_h / max;
        let production_h = day.production * plot_h / max;
        let _ = write!(
            svg,
            r#"<g><title>{date}: {sandbox} sandbox, {production} production</title><rect class="bar-sandbox" x="{x}" y="{ys}" width="{bar_w}" height="{sandbox_h}"/><rect class="bar-production" x="{x}" y="{yp}" width="{bar_w}" height="{production_h}"/></g>"#,
            date = day.date,
            sandbox = day.sandbox,
            production = day.production,
            ys = baseline - sandbox_h,
            yp = baseline - sandbox_h - production_h,
        );
    }
    if let (Some(first), Some(last)) = (days.first(), days.last()) {
        let _ = write!(
            svg,
            r#"<text class="label" x="{LEFT}" y="{HEIGHT}">{first}</text><text class="label" x="{WIDTH}" y="{HEIGHT}" text-anchor="end">{last}</text>"#,
            first = first.date,
            last = last.date,
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(date: &str, sandbox: u64, production: u64) -> DayUsage {
        DayUsage {
            date: date.into(),
            sandbox,
            production,
        }
    }

    #[test]
    fn bars_scale_to_the_busiest_day() {
        let svg = requests_per_day(&[day("2026-11-01", 10, 30), day("2026-11-02", 0, 0)]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("40 in total, at most 40 on one day"));
        // The busiest day fills the plot height (180 - 16 - 24 = 140): 35 + 105.
        assert!(svg.contains(r#"height="35""#) && svg.contains(r#"height="105""#));
        assert!(svg.contains("2026-11-02: 0 sandbox, 0 production"));
        assert!(!svg.contains("style="));
    }
}
