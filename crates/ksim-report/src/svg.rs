//! The timeline chart as SVG.
//!
//! plotters is built without a font backend: its fallback estimates text extents and the SVG
//! backend writes labels as `<text>` elements the viewer lays out, so rendering needs no
//! system fonts or native libraries.

use std::collections::BTreeSet;

use plotters::chart::DualCoordChartContext;
use plotters::coord::{Shift, types::RangedCoordf64};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::error::ReportError;
use ksim_proto::json::to_millis;

use super::fidelity::{Measure, side};
use super::model::{Fidelity, FidelityBucket, Report, TimelineBucket, nodes_total};
use super::timeline::{bucket_ms, offset_ms};

/// What a series plots of each bucket.
type Value = fn(&TimelineBucket) -> u64;

const SIZE: (u32, u32) = (1200, 700);
const FONT: &str = "sans-serif";
/// Width of the right axis' tick labels and title, pixels.
const RIGHT_LABEL_AREA: i32 = 64;
/// Node group lines, dark enough to read on white and unlike the other series' colors.
const GROUP_COLORS: [RGBColor; 6] = [
    RGBColor(0, 150, 136),
    RGBColor(123, 31, 162),
    RGBColor(121, 85, 72),
    RGBColor(96, 125, 139),
    RGBColor(130, 119, 23),
    RGBColor(216, 27, 96),
];

/// The chart: x is seconds since the replay start in recorded time; nodes (total and per group) and the
/// autoscaler's added/removed nodes (bars) on the left axis, pods running, pending and
/// unscheduled on the right axis, since pods usually outnumber nodes by far.
pub fn render_svg(report: &Report) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(report, &root).map_err(|error| ReportError::Chart(error.to_string()))?;
    }
    Ok(svg)
}

/// Nodes, pods and seconds are whole numbers: ticks between them (plotters puts some at .5 on
/// small ranges) get no label, rather than a rounded one that repeats its neighbour's.
fn tick_label(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        String::new()
    }
}

fn draw<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let timeline = &report.timeline;
    let x_max = timeline.last().map_or(0.0, seconds).max(1.0);
    let nodes_max = timeline
        .iter()
        .map(|b| {
            nodes_total(b)
                .max(b.autoscaler_scale_ups)
                .max(b.autoscaler_scale_downs)
        })
        .max()
        .unwrap_or(0);
    let pods_max = timeline
        .iter()
        .map(|b| running(b).max(pending(b)).max(b.unscheduled_pods))
        .max()
        .unwrap_or(0);

    let groups: BTreeSet<&String> = timeline
        .iter()
        .flat_map(|b| b.nodes.iter().map(|count| &count.node_group))
        .collect();
    // Two bars, the total, a line per group and three pod lines.
    let longest = groups.iter().map(|g| g.len() + 6).max().unwrap_or(0);
    let mut legend = Legend::for_labels(longest.max(29));
    let disrupted = report
        .disruptions
        .as_ref()
        .is_some_and(|d| d.outcomes.iter().any(|outcome| outcome.error.is_empty()));
    let (plot, below) = legend.split(root, 6 + groups.len() + usize::from(disrupted));
    let mut chart = frame(
        &plot,
        format!("ksim simulation {}", report.simulation_id),
        x_max,
        ("nodes", nodes_max),
        pods_max,
    )?;

    // Disruptions first, as shaded spans under everything: from when each began to when it
    // was over (or the end).
    let spans: Vec<(f64, f64)> = report
        .disruptions
        .iter()
        .flat_map(|d| &d.outcomes)
        .filter(|outcome| outcome.error.is_empty())
        .map(|outcome| {
            let at = |d: Option<&prost_types::Duration>| to_millis(d) as f64 / 1000.0;
            let begun = at(outcome.offset.as_ref());
            let over = outcome
                .recovered_offset
                .as_ref()
                .map_or(x_max, |end| at(Some(end)));
            (begun, over.max(begun))
        })
        .collect();
    if disrupted {
        let style = RGBColor(120, 120, 120).mix(0.18).filled();
        let top = nodes_max.max(1) as f64;
        chart.draw_series(
            spans
                .iter()
                .map(|&(from, to)| Rectangle::new([(from, 0.0), (to, top)], style)),
        )?;
        legend.add("disruption", Sample::Bar(style));
    }

    // Bars first so the lines stay visible on top: added nodes left of the second's mark,
    // removed nodes right of it. At least a few pixels wide on long timelines.
    let width = (x_max / 300.0).max(0.4);
    let bars: [(&str, RGBColor, f64, Value); 2] = [
        ("nodes added by autoscaler", GREEN, -width, |b| {
            b.autoscaler_scale_ups
        }),
        ("nodes removed by autoscaler", MAGENTA, 0.0, |b| {
            b.autoscaler_scale_downs
        }),
    ];
    for (label, color, shift, count) in bars {
        let style = color.mix(0.6).filled();
        chart.draw_series(timeline.iter().filter(|b| count(b) > 0).map(|b| {
            let x = seconds(b) + shift;
            Rectangle::new([(x, 0.0), (x + width, count(b) as f64)], style)
        }))?;
        legend.add(label, Sample::Bar(style));
    }

    let mut line = |label: String,
                    style: ShapeStyle,
                    secondary: bool,
                    value: &dyn Fn(&TimelineBucket) -> u64|
     -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let points = timeline.iter().map(|b| (seconds(b), value(b) as f64));
        if secondary {
            chart.draw_secondary_series(LineSeries::new(points, style))?;
        } else {
            chart.draw_series(LineSeries::new(points, style))?;
        }
        legend.add(&label, Sample::Line(style));
        Ok(())
    };

    line(
        "nodes (total)".into(),
        BLACK.stroke_width(3),
        false,
        &nodes_total,
    )?;
    for (i, group) in groups.into_iter().enumerate() {
        let style = GROUP_COLORS[i % GROUP_COLORS.len()].stroke_width(2);
        let nodes = |b: &TimelineBucket| {
            b.nodes
                .iter()
                .find(|count| count.node_group == *group)
                .map_or(0, |count| count.nodes)
        };
        line(format!("nodes {group}"), style, false, &nodes)?;
    }
    let pods: [(&str, RGBColor, Value); 3] = [
        ("pods running (right axis)", BLUE, running),
        ("pods pending (right axis)", RGBColor(230, 140, 0), pending),
        ("pods unscheduled (right axis)", RED, |b| b.unscheduled_pods),
    ];
    for (label, color, value) in pods {
        line(label.into(), color.stroke_width(2), true, &value)?;
    }

    legend.draw(&below)?;
    root.present()
}

/// The comparison chart: recorded series dashed, simulated solid, one color per series;
/// nodes (total and per group) on the left axis, pods running and pending on the right. Each
/// bucket's value is drawn as a step across the bucket.
pub fn render_fidelity_svg(
    simulation_id: &str,
    fidelity: &Fidelity,
) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw_fidelity(simulation_id, fidelity, &root)
            .map_err(|error| ReportError::Chart(error.to_string()))?;
    }
    Ok(svg)
}

fn draw_fidelity<DB: DrawingBackend>(
    simulation_id: &str,
    fidelity: &Fidelity,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let buckets = &fidelity.buckets;
    let width = to_millis(fidelity.bucket_width.as_ref()) as f64 / 1000.0;
    let at = |b: &FidelityBucket| to_millis(b.offset.as_ref()) as f64 / 1000.0;
    let x_max = buckets.last().map_or(0.0, |b| at(b) + width).max(1.0);
    let measures = Measure::all(buckets);
    let is_pods = |m: &Measure| matches!(m, Measure::PodsRunning | Measure::PodsPending);
    let max_of = |pods: bool| {
        buckets
            .iter()
            .flat_map(|b| [side(b, false), side(b, true)])
            .flat_map(|state| {
                measures
                    .iter()
                    .filter(move |m| is_pods(m) == pods)
                    .map(move |m| m.value(state))
            })
            .max()
            .unwrap_or(0)
    };
    let longest = measures.iter().map(|m| m.name().len()).max().unwrap_or(0);
    let mut legend = Legend::for_labels(longest.max(25));
    let (plot, below) = legend.split(root, measures.len());
    let mut chart = frame(
        &plot,
        format!("ksim simulation {simulation_id}: recorded (dashed) vs simulated (solid)"),
        x_max,
        ("ready nodes", max_of(false)),
        max_of(true),
    )?;

    let mut group_colors = GROUP_COLORS.iter().cycle();
    for measure in &measures {
        let (color, stroke, label) = match measure {
            Measure::Nodes => (BLACK, 3, "nodes (total)".to_owned()),
            Measure::Group(_) => (
                *group_colors.next().unwrap_or(&BLACK),
                2,
                measure.name().replacen('/', " ", 1),
            ),
            Measure::PodsRunning => (BLUE, 2, "pods running (right axis)".to_owned()),
            Measure::PodsPending => (
                RGBColor(230, 140, 0),
                2,
                "pods pending (right axis)".to_owned(),
            ),
        };
        let steps = |simulated: bool| {
            buckets.iter().flat_map(move |b| {
                let (x, y) = (at(b), measure.value(side(b, simulated)) as f64);
                [(x, y), (x + width, y)]
            })
        };
        let solid = color.stroke_width(stroke);
        let dashed = color.mix(0.8).stroke_width(stroke);
        let dashes = DashedLineSeries::new(steps(false).collect::<Vec<_>>(), 8, 6, dashed);
        let line = LineSeries::new(steps(true), solid);
        if is_pods(measure) {
            chart.draw_secondary_series(dashes)?;
            chart.draw_secondary_series(line)?;
        } else {
            chart.draw_series(dashes)?;
            chart.draw_series(line)?;
        }
        legend.add(&label, Sample::Line(solid));
    }
    legend.draw(&below)?;
    root.present()
}

/// Runs side by side (`ksim compare`): each run's nodes (solid, left axis) and pending pods
/// (dashed, right axis) over recorded time, a color per run.
pub fn render_comparison_svg(runs: &[(String, Report)]) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw_comparison(runs, &root).map_err(|error| ReportError::Chart(error.to_string()))?;
    }
    Ok(svg)
}

fn draw_comparison<DB: DrawingBackend>(
    runs: &[(String, Report)],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let buckets = || runs.iter().flat_map(|(_, report)| &report.timeline);
    let x_max = runs
        .iter()
        .filter_map(|(_, report)| {
            let last = report.timeline.last()?;
            Some(seconds(last) + bucket_ms(report) as f64 / 1000.0)
        })
        .fold(1.0, f64::max);
    let nodes_max = buckets().map(nodes_total).max().unwrap_or(0);
    let pending_max = buckets().map(pending).max().unwrap_or(0);
    let longest = runs.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut legend = Legend::for_labels(longest);
    let (plot, below) = legend.split(root, runs.len());
    let mut chart = frame(
        &plot,
        "ksim compare: nodes (solid) and pending pods (dashed)".to_owned(),
        x_max,
        ("nodes", nodes_max),
        pending_max,
    )?;
    let colors = [BLACK, BLUE, RGBColor(230, 140, 0)]
        .into_iter()
        .chain(GROUP_COLORS)
        .cycle();
    for ((name, report), color) in runs.iter().zip(colors) {
        let width = bucket_ms(report) as f64 / 1000.0;
        let steps = |value: Value| {
            report
                .timeline
                .iter()
                .flat_map(move |b| {
                    let y = value(b) as f64;
                    [(seconds(b), y), (seconds(b) + width, y)]
                })
                .collect::<Vec<_>>()
        };
        let solid = color.stroke_width(2);
        chart.draw_series(LineSeries::new(steps(nodes_total), solid))?;
        legend.add(name, Sample::Line(solid));
        chart.draw_secondary_series(DashedLineSeries::new(
            steps(pending),
            8,
            6,
            color.mix(0.8).stroke_width(2),
        ))?;
    }
    legend.draw(&below)?;
    root.present()
}

/// Pixels a legend row takes.
const LEGEND_ROW: i32 = 22;

/// What a legend entry shows beside its label.
enum Sample {
    Line(ShapeStyle),
    Bar(ShapeStyle),
}

/// A chart's legend, drawn under the chart rather than on it, so it never hides a line it
/// names (inside the plot it covered the first minutes of every timeline).
struct Legend {
    /// Entries a row holds: up to four, fewer when the labels are long (a compared run is
    /// named by its report's path).
    columns: usize,
    entries: Vec<(String, Sample)>,
}

impl Legend {
    /// A legend whose longest label has `longest` characters.
    fn for_labels(longest: usize) -> Self {
        // About 7 pixels a character at 14 px, and the sample before it.
        let per_column = longest * 7 + 40;
        let columns = ((SIZE.0 as usize - 160) / per_column).clamp(1, 4);
        Self {
            columns,
            entries: Vec::new(),
        }
    }

    /// The chart's area and, below it, the legend's: as many rows as `entries` need.
    fn split<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        entries: usize,
    ) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
        let rows = entries.div_ceil(self.columns).max(1) as i32;
        let (_, height) = root.dim_in_pixel();
        root.split_vertically(height as i32 - rows * LEGEND_ROW - 12)
    }

    fn add(&mut self, label: &str, sample: Sample) {
        self.entries.push((label.to_owned(), sample));
    }

    /// In rows of `columns` entries, from the left of the plot.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let (width, _) = area.dim_in_pixel();
        let left = 16 + 64;
        let column = (width as i32 - 2 * left) / self.columns as i32;
        let text = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, (label, sample)) in self.entries.iter().enumerate() {
            let x = left + (i % self.columns) as i32 * column;
            let y = (i / self.columns) as i32 * LEGEND_ROW + LEGEND_ROW / 2;
            match sample {
                Sample::Line(style) => {
                    area.draw(&PathElement::new(vec![(x, y), (x + 24, y)], *style))?;
                }
                Sample::Bar(style) => {
                    area.draw(&Rectangle::new([(x, y - 6), (x + 24, y + 6)], *style))?;
                }
            }
            area.draw_text(label, &text, (x + 32, y))?;
        }
        Ok(())
    }
}

/// Seconds across, a count up.
type Axes = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// Both charts' frame: the title, seconds of recorded time across, nodes (named by `nodes_desc`)
/// on the left axis up to `nodes_max`, pods on the right up to `pods_max`.
fn frame<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: String,
    x_max: f64,
    (nodes_desc, nodes_max): (&str, u64),
    pods_max: u64,
) -> Result<DualCoordChartContext<'a, DB, Axes, Axes>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .right_y_label_area_size(RIGHT_LABEL_AREA)
        .build_cartesian_2d(0.0..x_max, 0.0..headroom(nodes_max))?
        .set_secondary_coord(0.0..x_max, 0.0..headroom(pods_max));
    chart
        .configure_mesh()
        .x_desc("seconds since replay start (recorded time)")
        .y_desc(nodes_desc)
        .x_label_formatter(&|x| tick_label(*x))
        .y_label_formatter(&|y| tick_label(*y))
        .axis_desc_style((FONT, 16))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_label_formatter(&|y| tick_label(*y))
        .draw()?;
    // plotters turns a right axis title clockwise, which reads as "spod" beside the left one;
    // this one is drawn as the left is, read from the bottom up, at the right edge.
    let (plot_x, plot_y) = chart.plotting_area().get_pixel_range();
    let title = TextStyle::from((FONT, 16).into_font())
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let right_edge = plot_x.end + RIGHT_LABEL_AREA - 20;
    root.draw_text(
        "pods",
        &title,
        (right_edge, (plot_y.start + plot_y.end) / 2),
    )?;
    Ok(chart)
}

fn seconds(bucket: &TimelineBucket) -> f64 {
    offset_ms(bucket) as f64 / 1000.0
}

fn running(bucket: &TimelineBucket) -> u64 {
    bucket.pods.map_or(0, |pods| pods.running)
}

fn pending(bucket: &TimelineBucket) -> u64 {
    bucket.pods.map_or(0, |pods| pods.pending)
}

/// Room above the highest value so it doesn't sit on the frame; at least 1 for an empty chart.
fn headroom(max: u64) -> f64 {
    (max as f64 * 1.1).ceil().max(1.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    #[test]
    fn the_comparison_chart_names_every_run() {
        let report = fixtures::report();
        let runs = [
            ("spread".to_owned(), report.clone()),
            ("packed".to_owned(), report),
        ];
        let svg = render_comparison_svg(&runs).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("\nspread\n") && svg.contains("\npacked\n"),
            "{svg}"
        );
    }

    /// The y of the `<text>` whose content is `content`.
    fn text_y(svg: &str, content: &str) -> f64 {
        let at = svg
            .find(&format!(">\n{content}\n<"))
            .unwrap_or_else(|| panic!("no text {content:?}"));
        let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
        let y = tag.split(" y=\"").nth(1).unwrap();
        y[..y.find('"').unwrap()].parse().unwrap()
    }

    #[test]
    fn every_legend_sits_below_its_chart_not_on_its_lines() {
        let report = fixtures::report();
        let labels = [
            "nodes added by autoscaler",
            "nodes (total)",
            "nodes group-b",
            "pods unscheduled (right axis)",
        ];
        let charts = [
            (render_svg(&report).unwrap(), &labels[..]),
            (
                render_fidelity_svg("sim-42", report.fidelity.as_ref().unwrap()).unwrap(),
                &labels[1..3],
            ),
            (
                render_comparison_svg(&[("spread".to_owned(), report.clone())]).unwrap(),
                &["spread"][..],
            ),
        ];
        for (svg, labels) in charts {
            // The x axis' title is the lowest text of the chart itself.
            let axis = text_y(&svg, "seconds since replay start (recorded time)");
            for label in labels {
                assert!(text_y(&svg, label) > axis, "{label} is not below the chart");
            }
        }
    }

    #[test]
    fn long_legend_labels_get_fewer_columns() {
        assert_eq!(Legend::for_labels(29).columns, 4);
        assert_eq!(Legend::for_labels(80).columns, 1);
        assert!(Legend::for_labels(50).columns < 4);
    }

    #[test]
    fn only_whole_ticks_are_labelled() {
        assert_eq!(tick_label(4.0), "4");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(3.5), "");
    }

    use super::super::fixtures;
    use super::*;

    #[test]
    fn chart_has_title_axes_series_and_legend() {
        let svg = render_svg(&fixtures::report()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for text in [
            "ksim simulation sim-42",
            "seconds since replay start",
            ">\nnodes\n<",
            ">\npods\n<",
            "nodes (total)",
            "nodes group-a",
            "nodes group-b",
            "pods running (right axis)",
            "pods pending (right axis)",
            "pods unscheduled (right axis)",
            "nodes added by autoscaler",
            "nodes removed by autoscaler",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        // Both axis titles read from the bottom up (a right one turned clockwise read "spod").
        for title in ["nodes", "pods"] {
            let at = svg.find(&format!(">\n{title}\n<")).unwrap();
            let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
            assert!(tag.contains("transform=\"rotate(270,"), "{title}: {tag}");
        }
        // Total, two groups and three pod lines, plus their legend samples.
        assert!(svg.matches("<polyline").count() >= 6 * 2);
        // One bar per bucket with a scale-up and one with a scale-down, plus legend samples.
        assert!(svg.contains(r##"fill="#00FF00""##));
    }

    #[test]
    fn fidelity_chart_draws_each_series_recorded_dashed_and_simulated_solid() {
        let report = fixtures::report();
        let svg = render_fidelity_svg("sim-42", report.fidelity.as_ref().unwrap()).unwrap();
        for text in [
            "recorded (dashed) vs simulated (solid)",
            "ready nodes",
            "nodes (total)",
            "nodes group-a",
            "nodes group-b",
            "pods running (right axis)",
            "pods pending (right axis)",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        // Five series: a solid line and a legend sample each, and dashes for the recorded one.
        assert!(svg.matches("<polyline").count() >= 5 * 2, "{svg}");
        let empty = Fidelity::default();
        assert!(
            render_fidelity_svg("x", &empty)
                .unwrap()
                .starts_with("<svg")
        );
    }

    #[test]
    fn disruptions_are_shaded_from_their_start_to_their_end() {
        let mut report = fixtures::report();
        let plain = render_svg(&report).unwrap();
        assert!(!plain.contains("\ndisruption\n"));
        report.disruptions = Some(crate::Disruptions {
            outcomes: vec![crate::DisruptionOutcome {
                kind: "node-failure".into(),
                offset: Some(ksim_proto::json::of_millis(1_000)),
                recovered_offset: Some(ksim_proto::json::of_millis(2_000)),
                ..Default::default()
            }],
            ..Default::default()
        });
        let shaded = render_svg(&report).unwrap();
        assert!(shaded.contains("\ndisruption\n"), "{shaded}");
        assert!(
            shaded.matches("<rect").count() > plain.matches("<rect").count(),
            "no span drawn"
        );
    }

    #[test]
    fn empty_report_still_renders_and_ids_are_escaped() {
        let report = Report {
            simulation_id: "a<b&c".into(),
            ..Report::default()
        };
        let svg = render_svg(&report).unwrap();
        assert!(svg.contains("ksim simulation a&lt;b&amp;c"));
        assert!(svg.contains("nodes (total)"));
    }
}
