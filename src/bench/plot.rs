//! The plot of a `hako bench` run, as an SVG file: per engine, grouped bars of the median
//! artifact load, call with the module in memory and call loading the artifact, each with a
//! whisker up to its 99th percentile; beside them, calls/s with several threads. The title names
//! the package, tool and machine.
//!
//! SVG only: plotters draws bitmap text only with a font of its own (a font file or the system's
//! font libraries), which hako does not carry, so a `.png` is refused with that reason rather
//! than drawn without labels. It measures nothing.

use std::path::Path;

use plotters::prelude::*;

use super::measure::Measured;
use super::report::Report;
use super::stats::Percentiles;

/// Why the plot was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{0}: the plot is drawn as SVG only (give a file ending in .svg)")]
    NotSvg(String),
    #[error("drawing {path}: {message}")]
    Draw { path: String, message: String },
}

/// Whether `path` names a file the plot can be written as.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    let svg = path
        .extension()
        .and_then(|ext| ext.to_str())
        .is_some_and(|ext| ext.eq_ignore_ascii_case("svg"));
    if svg {
        Ok(())
    } else {
        Err(PlotError::NotSvg(path.display().to_string()))
    }
}

/// Reads one latency of an engine's figures.
type LatencyOf = fn(&Measured) -> Option<Percentiles>;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 720;
const LATENCY_COLORS: [RGBColor; 3] = [
    RGBColor(0x4c, 0x78, 0xa8),
    RGBColor(0xf5, 0x85, 0x18),
    RGBColor(0x54, 0xa2, 0x4b),
];
const THROUGHPUT_COLOR: RGBColor = RGBColor(0x72, 0x4c, 0xa8);

/// Draws `report` into the SVG file at `path`.
pub fn write(report: &Report, path: &Path) -> Result<(), PlotError> {
    check_path(path)?;
    draw(report, path).map_err(|message| PlotError::Draw {
        path: path.display().to_string(),
        message,
    })
}

fn text<E: std::fmt::Display>(err: E) -> String {
    err.to_string()
}

fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let measured: Vec<&Measured> = report.results.measured.iter().collect();
    let names: Vec<String> = measured.iter().map(|m| m.engine.clone()).collect();
    let count = measured.len().max(1) as f64;

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(text)?;
    let title = format!(
        "hako bench: {} / {} on {}",
        report.package,
        report.tool,
        report.machine.summary()
    );
    let root = root.titled(&title, ("sans-serif", 18)).map_err(text)?;
    let (left, right) = root.split_horizontally(WIDTH * 64 / 100);
    let label = |x: &f64| -> String {
        let index = x.round();
        if (x - index).abs() > 1e-6 || index < 0.0 {
            return String::new();
        }
        names.get(index as usize).cloned().unwrap_or_default()
    };

    // Latencies: three bars per engine, p50 high, with a p99 whisker.
    let series: [(&str, LatencyOf); 3] = [
        ("artifact load", |m| m.load_us),
        ("call, module in memory", |m| m.call_in_memory_us),
        ("call, artifact from disk", |m| m.call_from_disk_us),
    ];
    let top = measured
        .iter()
        .flat_map(|m| series.iter().filter_map(|(_, of)| of(m)).map(|p| p.p99))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&left)
        .caption("latency in µs (bar: p50, whisker: p99)", ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..count - 0.5, 0.0..top)
        .map_err(text)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(measured.len().max(1))
        .x_label_formatter(&label)
        .x_label_style(("sans-serif", 12))
        .y_desc("µs")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(text)?;
    for (slot, ((name, of), color)) in series.iter().zip(LATENCY_COLORS).enumerate() {
        let offset = -0.36 + 0.24 * slot as f64;
        let bars: Vec<(f64, Percentiles)> = measured
            .iter()
            .enumerate()
            .filter_map(|(index, m)| of(m).map(|p| (index as f64 + offset, p)))
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|(x, p)| Rectangle::new([(*x, 0.0), (x + 0.22, p.p50)], color.filled())),
            )
            .map_err(text)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().map(|(x, p)| {
                let middle = x + 0.11;
                PathElement::new(
                    vec![(middle, p.p50), (middle, p.p99)],
                    BLACK.stroke_width(1),
                )
            }))
            .map_err(text)?;
        chart
            .draw_series(bars.iter().map(|(x, p)| {
                PathElement::new(
                    vec![(x + 0.06, p.p99), (x + 0.16, p.p99)],
                    BLACK.stroke_width(1),
                )
            }))
            .map_err(text)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(text)?;

    // Throughput: one bar per engine.
    let most = measured
        .iter()
        .filter_map(|m| m.calls_per_s)
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&right)
        .caption(
            format!(
                "calls/s, {} threads, module in memory",
                report.shape.threads
            ),
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..count - 0.5, 0.0..most)
        .map_err(text)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(measured.len().max(1))
        .x_label_formatter(&label)
        .x_label_style(("sans-serif", 11))
        .y_desc("calls/s")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(text)?;
    chart
        .draw_series(measured.iter().enumerate().filter_map(|(index, m)| {
            let x = index as f64;
            m.calls_per_s.map(|rate| {
                Rectangle::new([(x - 0.3, 0.0), (x + 0.3, rate)], THROUGHPUT_COLOR.filled())
            })
        }))
        .map_err(text)?;
    root.present().map_err(text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_svg_files_are_drawn() {
        assert!(check_path(Path::new("out.svg")).is_ok());
        assert!(check_path(Path::new("OUT.SVG")).is_ok());
        let err = check_path(Path::new("out.png")).unwrap_err().to_string();
        assert!(err.contains("SVG"), "{err}");
    }
}
