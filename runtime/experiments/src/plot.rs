//! The experiments' figures as SVG and PNG (plotters): lines of measured points, the paper's
//! reported values as dashed lines beside them, axes labelled with units.
//!
//! Text is drawn with DejaVu Sans, loaded once at run time from Debian's fonts-dejavu-core
//! (`scripts/setup.sh` installs it), so that no system font library is linked.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Where fonts-dejavu-core puts DejaVu Sans.
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// A line of points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its legend entry.
    pub label: String,
    /// (x, y) points, in x order; a paper value has one point, whose y is drawn across the x
    /// range of the measured series (its x is not used).
    pub points: Vec<(f64, f64)>,
    /// A value the paper reports (drawn dashed) rather than a measurement.
    pub paper: bool,
}

/// One figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// The caption.
    pub title: String,
    /// The x axis, with its unit.
    pub x_label: String,
    /// The y axis, with its unit.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Registers DejaVu Sans as the "sans-serif" family, once.
fn font() -> anyhow::Result<()> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!("{FONT_PATH}: {e} (install fonts-dejavu-core: scripts/setup.sh does)")
            })?;
            // plotters keeps the font for the program's life.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH}: not a font plotters can read"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for s in &fig.series {
        for &(x, y) in &s.points {
            if !s.paper {
                x0 = x0.min(x);
                x1 = x1.max(x);
            }
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() {
        return Err("a figure without points".into());
    }
    if x1 <= x0 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let y1 = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&fig.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(fig.x_label.as_str())
        .y_desc(fig.y_label.as_str())
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, s) in fig.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let style = colour.stroke_width(2);
        if s.paper {
            let y = s.points.first().map_or(0.0, |p| p.1);
            chart
                .draw_series(DashedLineSeries::new(vec![(x0, y), (x1, y)], 8, 6, style))
                .map_err(err)?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        } else {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(err)?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Writes `fig` as `dir/stem.svg` and `dir/stem.png` (1000 × 600).
pub fn write(fig: &Figure, dir: &Path, stem: &str) -> anyhow::Result<()> {
    font()?;
    let size = (1000, 600);
    let svg = dir.join(format!("{stem}.svg"));
    draw(&SVGBackend::new(&svg, size).into_drawing_area(), fig)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("drawing {}", svg.display()))?;
    let png = dir.join(format!("{stem}.png"));
    draw(&BitMapBackend::new(&png, size).into_drawing_area(), fig)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("drawing {}", png.display()))?;
    Ok(())
}
