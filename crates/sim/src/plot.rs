//! A report's figure as SVG (plotters): bars for the consolidation experiment, lines over time
//! for the fairness experiment.

use plotters::prelude::*;

/// What to draw.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Figure {
    /// Nothing.
    #[default]
    None,
    /// One bar per label.
    Bars {
        /// Title.
        title: String,
        /// Y axis label.
        y: String,
        /// (label, value).
        bars: Vec<(String, f64)>,
    },
    /// Labelled points.
    Scatter {
        /// Title.
        title: String,
        /// X axis label.
        x: String,
        /// Y axis label.
        y: String,
        /// (label, x, y).
        points: Vec<(String, f64, f64)>,
        /// A logarithmic Y axis (values must be positive).
        log_y: bool,
    },
    /// One line per label.
    Lines {
        /// Title.
        title: String,
        /// X axis label.
        x: String,
        /// Y axis label.
        y: String,
        /// (label, points).
        lines: Vec<(String, Vec<(f64, f64)>)>,
        /// A logarithmic Y axis (values must be positive).
        log_y: bool,
    },
}

/// Why a figure could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the figure: {0}")]
pub struct PlotError(String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

impl Figure {
    /// The figure as an SVG document (`None` when there is nothing to draw).
    pub fn svg(&self) -> Result<Option<String>, PlotError> {
        let mut out = String::new();
        match self {
            Figure::None => return Ok(None),
            Figure::Bars { title, y, bars } => {
                let root = SVGBackend::with_string(&mut out, (640, 400)).into_drawing_area();
                root.fill(&WHITE).map_err(err)?;
                let top = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.1;
                let mut chart = ChartBuilder::on(&root)
                    .caption(title, ("sans-serif", 18))
                    .margin(12)
                    .x_label_area_size(30)
                    .y_label_area_size(60)
                    .build_cartesian_2d((0..bars.len().max(1) - 1).into_segmented(), 0.0..top)
                    .map_err(err)?;
                let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
                chart
                    .configure_mesh()
                    .y_desc(y.as_str())
                    .x_label_formatter(&|v| match v {
                        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                        _ => String::new(),
                    })
                    .disable_x_mesh()
                    .draw()
                    .map_err(err)?;
                chart
                    .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                        let mut r =
                            Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)], BLUE.mix(0.6).filled());
                        r.set_margin(0, 0, 20, 20);
                        r
                    }))
                    .map_err(err)?;
                root.present().map_err(err)?;
            }
            Figure::Scatter { title, x, y, points, log_y } => {
                let root = SVGBackend::with_string(&mut out, (720, 480)).into_drawing_area();
                root.fill(&WHITE).map_err(err)?;
                let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
                let (x1, y0, y1) =
                    points.iter().fold((0.0f64, f64::INFINITY, 0.0f64), |(a, lo, hi), p| (a.max(fin(p.1)), lo.min(p.2), hi.max(fin(p.2))));
                let mut builder = ChartBuilder::on(&root);
                builder.caption(title, ("sans-serif", 18)).margin(16).x_label_area_size(40).y_label_area_size(50);
                let xr = 0.0..(x1 * 1.15).max(f64::MIN_POSITIVE);
                if *log_y {
                    let chart = builder.build_cartesian_2d(xr, log_range(y0, y1).log_scale()).map_err(err)?;
                    draw_points(chart, x, y, points)?;
                } else {
                    let chart = builder.build_cartesian_2d(xr, 0.0..(y1 * 1.15).max(f64::MIN_POSITIVE)).map_err(err)?;
                    draw_points(chart, x, y, points)?;
                }
                root.present().map_err(err)?;
            }
            Figure::Lines { title, x, y, lines, log_y } => {
                let root = SVGBackend::with_string(&mut out, (640, 400)).into_drawing_area();
                root.fill(&WHITE).map_err(err)?;
                let pts = lines.iter().flat_map(|l| l.1.iter());
                let (x0, x1, y0, y1) = pts.fold((f64::INFINITY, 0.0f64, f64::INFINITY, 0.0f64), |(a, b, lo, hi), p| {
                    (a.min(p.0), b.max(p.0), lo.min(p.1), hi.max(p.1))
                });
                let x0 = if x0.is_finite() { x0 } else { 0.0 };
                let mut builder = ChartBuilder::on(&root);
                builder.caption(title, ("sans-serif", 18)).margin(12).x_label_area_size(40).y_label_area_size(50);
                // Many lines: the legend gets room of its own at the right.
                let x1 = if lines.len() > 6 { x1 + (x1 - x0) * 0.6 } else { x1 };
                let xr = x0..x1.max(x0 + f64::MIN_POSITIVE);
                if *log_y {
                    let chart = builder.build_cartesian_2d(xr, log_range(y0, y1).log_scale()).map_err(err)?;
                    draw_lines(chart, x, y, lines)?;
                } else {
                    let chart = builder.build_cartesian_2d(xr, 0.0..(y1 * 1.1).max(f64::MIN_POSITIVE)).map_err(err)?;
                    draw_lines(chart, x, y, lines)?;
                }
                root.present().map_err(err)?;
            }
        }
        Ok(Some(out))
    }
}

/// A logarithmic Y axis's range for values from `y0` to `y1` (a smallest value of 0 or less
/// cannot be drawn: the axis then starts at 0.001), with room above and below.
fn log_range(y0: f64, y1: f64) -> std::ops::Range<f64> {
    let lo = if y0.is_finite() && y0 > 0.0 { y0 / 1.5 } else { 1e-3 };
    lo..(y1 * 1.5).max(lo * 10.0)
}

/// One line per label on `chart`, with a legend.
fn draw_lines<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    x: &str,
    y: &str,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart.configure_mesh().x_desc(x).y_desc(y).draw().map_err(err)?;
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 16, b)], color.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    Ok(())
}

/// Labelled points on `chart` (a non-finite coordinate at 0), with a legend.
fn draw_points<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    x: &str,
    y: &str,
    points: &[(String, f64, f64)],
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
    chart.configure_mesh().x_desc(x).y_desc(y).draw().map_err(err)?;
    for (i, (label, px, py)) in points.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series([Circle::new((fin(*px), fin(*py)), 4, color.filled())])
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(a, b)| Circle::new((a + 8, b), 4, color.filled()));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_bars_lines_and_points_as_svg() {
        let b = Figure::Bars { title: "t".into(), y: "Gbit/s".into(), bars: vec![("a".into(), 2.0), ("b".into(), 1.0)] };
        let svg = b.svg().unwrap().unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Gbit/s"));
        assert!(svg.matches("<rect").count() >= 3, "background and two bars");
        let l = Figure::Lines {
            title: "t".into(),
            x: "ms".into(),
            y: "u".into(),
            lines: vec![("user1".into(), vec![(0.0, 1.0), (1.0, 2.0)])],
            log_y: false,
        };
        let svg = l.svg().unwrap().unwrap();
        assert!(svg.contains("user1") && svg.contains("<polyline"));
        for log_y in [false, true] {
            let points = vec![("static-max".into(), 1.0, 1.0), ("static-avg".into(), 0.2, 500.0)];
            let p = Figure::Scatter { title: "t".into(), x: "OpEx".into(), y: "slowdown".into(), points, log_y };
            let svg = p.svg().unwrap().unwrap();
            assert!(svg.contains("static-avg") && svg.matches("<circle").count() >= 2, "log_y {log_y}");
        }
        assert_eq!(Figure::None.svg().unwrap(), None);
    }
}
