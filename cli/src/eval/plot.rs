//! PNG plots of the measurements, drawn with `plotters` on its bitmap back end.
//!
//! Text is rendered by `ab_glyph` from the DejaVu Sans font embedded in the binary (the
//! `dejavu` crate), so plotting needs neither fontconfig nor any font on the system.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::setup::create_parent;

const FONT: &str = "sans-serif";

/// Series colors, in order (colour-blind-safe palette).
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(140, 140, 140),
];

/// The color of series `i`.
pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn fonts() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The embedded font is valid TrueType; a failure would only lose the text.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("cannot draw the plot: {e}")
}

/// One bar of a horizontal bar chart.
pub struct Bar {
    /// Label on the left axis.
    pub label: String,
    /// Length.
    pub value: f64,
    /// Text printed after the bar.
    pub note: String,
    /// Fill color.
    pub color: RGBColor,
}

/// Horizontal bars, first at the top, with a dashed vertical reference line (e.g. the
/// full-precision value).
pub fn bar_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    bars: &[Bar],
    reference: Option<f64>,
) -> Result<()> {
    fonts();
    create_parent(path)?;
    let n = bars.len().max(1);
    let height = 120 + 44 * n as u32;
    let root = BitMapBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max = bars
        .iter()
        .map(|b| b.value)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(230)
        .build_cartesian_2d(0.0..max * 1.25, -0.5..n as f64 - 0.5)
        .map_err(err)?;
    let label_of = |y: &f64| {
        let i = n as f64 - 1.0 - y.round();
        bars.get(i as usize)
            .filter(|_| (y - y.round()).abs() < 1e-6 && i >= 0.0)
            .map_or_else(String::new, |b| b.label.clone())
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&label_of)
        .x_desc(x_label)
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    for (i, bar) in bars.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, y - 0.35), (bar.value, y + 0.35)],
                bar.color.filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                bar.note.clone(),
                (bar.value + max * 0.01, y + 0.15),
                (FONT, 14),
            )))
            .map_err(err)?;
    }
    if let Some(x) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                [(x, -0.5), (x, n as f64 - 0.5)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// One line of a panel.
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// One value per x position (`None` where not measured).
    pub values: Vec<Option<f64>>,
}

/// A panel of lines over the same categorical x axis.
pub struct Panel {
    /// Panel caption.
    pub title: String,
    /// Y axis description.
    pub y_label: String,
    /// Lines.
    pub series: Vec<Series>,
}

/// Panels side by side, sharing categorical x positions (e.g. context lengths).
pub fn line_panels(path: &Path, title: &str, x_labels: &[String], panels: &[Panel]) -> Result<()> {
    fonts();
    create_parent(path)?;
    // Two panels per row keeps the image readable when shown scaled down.
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().max(1).div_ceil(cols);
    let size = (600 * cols as u32, 60 + 440 * rows as u32);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 22)).map_err(err)?;
    let areas = root.split_evenly((rows, cols));
    let nx = x_labels.len().max(1);
    for (area, panel) in areas.iter().zip(panels) {
        let values = panel.series.iter().flat_map(|s| s.values.iter().flatten());
        let max = values.copied().fold(0.0f64, f64::max).max(1e-9);
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, (FONT, 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.3..nx as f64 - 0.7, 0.0..max * 1.1)
            .map_err(err)?;
        let label_of = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                x_labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_labels(nx)
            .x_label_formatter(&label_of)
            .y_desc(panel.y_label.as_str())
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for (i, series) in panel.series.iter().enumerate() {
            let c = color(i);
            let points: Vec<(f64, f64)> = series
                .values
                .iter()
                .enumerate()
                .filter_map(|(x, v)| v.map(|v| (x as f64, v)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(series.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 12))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// A grid of cells colored from red (0) to green (1), each labeled with its value.
pub fn heat_map(
    path: &Path,
    title: &str,
    x_labels: &[String],
    y_labels: &[String],
    values: &[Vec<Option<f64>>],
) -> Result<()> {
    fonts();
    create_parent(path)?;
    let (nx, ny) = (x_labels.len().max(1), y_labels.len().max(1));
    // Wide enough for the title even with one or two lengths.
    let width = (140 + 110 * nx as u32).max(620);
    let root = BitMapBackend::new(path, (width, 140 + 60 * ny as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..nx as f64 - 0.5, -0.5..ny as f64 - 0.5)
        .map_err(err)?;
    let pick = |labels: &[String], v: &f64, flip: bool| {
        let i = v.round();
        if (v - i).abs() > 1e-6 || i < 0.0 {
            return String::new();
        }
        let n = labels.len() as f64;
        let index = if flip { n - 1.0 - i } else { i };
        labels.get(index as usize).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(nx)
        .y_labels(ny)
        .x_label_formatter(&|v| pick(x_labels, v, false))
        .y_label_formatter(&|v| pick(y_labels, v, true))
        .x_desc("haystack tokens")
        .y_desc("needle depth")
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    for (row, cells) in values.iter().enumerate() {
        let y = (ny - 1 - row) as f64;
        for (col, value) in cells.iter().enumerate() {
            let x = col as f64;
            let fill = match value {
                Some(v) => RGBColor(
                    (220.0 - 170.0 * v) as u8,
                    (80.0 + 120.0 * v) as u8,
                    (80.0 - 10.0 * v) as u8,
                ),
                None => RGBColor(220, 220, 220),
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x - 0.48, y - 0.46), (x + 0.48, y + 0.46)],
                    fill.filled(),
                )))
                .map_err(err)?;
            let text = value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x - 0.15, y + 0.1),
                    (FONT, 16).into_font().color(&WHITE),
                )))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_written_as_png() {
        let dir = tempfile::tempdir().unwrap();
        let bars = [
            Bar {
                label: "full".into(),
                value: 10.0,
                note: "10.00".into(),
                color: color(0),
            },
            Bar {
                label: "k2v2-g32-r128-per-token".into(),
                value: 21.0,
                note: "21.00 (+110%)".into(),
                color: color(1),
            },
        ];
        let bar_path = dir.path().join("bars.png");
        bar_chart(&bar_path, "Perplexity", "perplexity", &bars, Some(10.0)).unwrap();
        let lines = dir.path().join("sub/lines.png");
        let panel = Panel {
            title: "decode".into(),
            y_label: "tokens/s".into(),
            series: vec![Series {
                name: "full".into(),
                values: vec![Some(10.0), None, Some(8.0)],
            }],
        };
        line_panels(
            &lines,
            "Bench",
            &["512".into(), "1k".into(), "2k".into()],
            &[panel],
        )
        .unwrap();
        let heat = dir.path().join("heat.png");
        heat_map(
            &heat,
            "Needle",
            &["1k".into(), "2k".into()],
            &["0%".into(), "50%".into()],
            &[vec![Some(1.0), Some(0.0)], vec![None, Some(0.5)]],
        )
        .unwrap();
        for p in [bar_path, lines, heat] {
            let bytes = std::fs::read(&p).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{}", p.display());
        }
    }
}
