//! The PNGs of `kvfabric bench … --plot FILE`: what every chart shares (the embedded font, the
//! series colours, the error mapping, the `--plot` argument, writing the file) and the generic
//! chart the benches draw their figures with ([`write_bars`]): grouped bars of named figures,
//! a panel per unit, one colour per series, each bar labelled with its value. Drawn with
//! plotters' bitmap backend; text uses a font compiled into the binary (DejaVu Sans Mono,
//! `crates/bench/assets`), so no system font is needed.
//!
//! Owns: the pictures; never measures (a chart is drawn from the figures a bench printed).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, ensure};
use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The font's family name in the charts.
pub(crate) const FAMILY: &str = "sans-serif";
static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Registers the embedded font under [`FAMILY`] (parsed once per process).
pub(crate) fn register() -> anyhow::Result<()> {
    static PARSED: OnceLock<bool> = OnceLock::new();
    let parsed = *PARSED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    ensure!(
        parsed,
        "the embedded font (assets/DejaVuSansMono.ttf): expected a TrueType font, found bytes that do not parse"
    );
    Ok(())
}

/// Series colours, in order: the first series (kvfabric's figures) blue, the second (its
/// baseline) grey, then colours that stand apart from both.
pub(crate) const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(120, 120, 120),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
/// kvfabric's colour.
pub(crate) const KVFABRIC: RGBColor = PALETTE[0];
/// The baseline's colour.
pub(crate) const BASELINE: RGBColor = PALETTE[1];

/// A drawing error, as the benches report it.
pub(crate) fn drawing<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

/// Draws a picture of `size` pixels with `draw` and writes it to `path` as a PNG.
pub(crate) fn write_png(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, size).into_drawing_area();
    draw(&root)?;
    root.present()
        .map_err(|e| anyhow!("writing the plot to {}: {e}", path.display()))?;
    println!("plot written to {}", path.display());
    Ok(())
}

/// `--plot FILE`, shared by every `kvfabric bench` that draws its figures.
#[derive(Debug, Clone, Args)]
pub(crate) struct PlotArg {
    /// Also draw the run's figures as a PNG here.
    #[arg(long = "plot", value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
}

impl PlotArg {
    /// Checks, before a run, that the file can be created where it was asked for: its
    /// directory exists (so a long run does not end in an error it could have had first).
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        ensure!(
            dir.is_dir(),
            "--plot {}: expected a file in an existing directory, found no directory {}",
            path.display(),
            dir.display()
        );
        ensure!(
            !path.is_dir(),
            "--plot {}: expected a file name, found a directory",
            path.display()
        );
        Ok(())
    }

    /// Draws `bars` under `title` into the file, if one was given.
    pub(crate) fn write_bars(&self, title: &str, bars: &[Bar]) -> anyhow::Result<()> {
        match &self.file {
            Some(path) => write_bars(path, title, bars),
            None => Ok(()),
        }
    }
}

/// One figure of a chart: the bar of `series` in `group`, on the panel of `unit`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bar {
    pub(crate) group: String,
    pub(crate) series: String,
    pub(crate) value: f64,
    pub(crate) unit: String,
}

impl Bar {
    pub(crate) fn new(
        group: impl Into<String>,
        series: impl Into<String>,
        value: f64,
        unit: impl Into<String>,
    ) -> Bar {
        Bar {
            group: group.into(),
            series: series.into(),
            value,
            unit: unit.into(),
        }
    }
}

/// Writes the chart of `bars` (see [`draw_bars`]) to `path` as a PNG.
pub(crate) fn write_bars(path: &Path, title: &str, bars: &[Bar]) -> anyhow::Result<()> {
    let size = size(&layout(bars)?);
    write_png(path, size, |root| draw_bars(root, title, bars))
}

/// The chart's width, and the height of one row of panels.
const WIDTH_PX: u32 = 1100;
const ROW_PX: u32 = 380;
/// Title and legend above the panels.
const HEAD_PX: u32 = 80;
const LEGEND_PX: u32 = 30;
const MARGIN_PX: u32 = 12;
const Y_AREA_PX: u32 = 62;
const LINE_PX: u32 = 16;

/// Series, units and groups in the order they first appear in the rows.
#[derive(Debug, PartialEq)]
struct Layout<'a> {
    series: Vec<&'a str>,
    panels: Vec<Panel<'a>>,
}

#[derive(Debug, PartialEq)]
struct Panel<'a> {
    unit: &'a str,
    groups: Vec<&'a str>,
    /// Indices into [`Layout::series`] of the series with a bar here, in that order.
    series: Vec<usize>,
    /// Each bar with its series' index into [`Layout::series`].
    bars: Vec<(usize, &'a Bar)>,
}

fn index_of<'a>(v: &mut Vec<&'a str>, s: &'a str) -> usize {
    v.iter().position(|x| *x == s).unwrap_or_else(|| {
        v.push(s);
        v.len() - 1
    })
}

fn layout(bars: &[Bar]) -> anyhow::Result<Layout<'_>> {
    ensure!(
        !bars.is_empty(),
        "a chart: expected at least one figure, found none"
    );
    let mut l = Layout {
        series: Vec::new(),
        panels: Vec::new(),
    };
    for (i, b) in bars.iter().enumerate() {
        ensure!(
            b.value.is_finite() && b.value >= 0.0,
            "figure {i} ({} / {} in {}): expected a finite value >= 0, found {}",
            b.group,
            b.series,
            b.unit,
            b.value
        );
        let s = index_of(&mut l.series, &b.series);
        let p = match l.panels.iter().position(|p| p.unit == b.unit) {
            Some(p) => p,
            None => {
                l.panels.push(Panel {
                    unit: &b.unit,
                    groups: Vec::new(),
                    series: Vec::new(),
                    bars: Vec::new(),
                });
                l.panels.len() - 1
            }
        };
        let panel = &mut l.panels[p];
        if panel
            .bars
            .iter()
            .any(|(_, o)| o.group == b.group && o.series == b.series)
        {
            bail!(
                "figure {i}: expected one figure per group and series, found a second for {} / {} in {}",
                b.group,
                b.series,
                b.unit
            );
        }
        index_of(&mut panel.groups, &b.group);
        if !panel.series.contains(&s) {
            panel.series.push(s);
            panel.series.sort_unstable();
        }
        panel.bars.push((s, b));
    }
    ensure!(
        l.series.len() <= PALETTE.len(),
        "a chart: expected at most {} series, found {} ({})",
        PALETTE.len(),
        l.series.len(),
        l.series.join(", ")
    );
    Ok(l)
}

/// Rows and columns of `n` panels: one row of up to three, else two rows.
fn grid(n: usize) -> (usize, usize) {
    let cols = if n <= 3 { n } else { n.div_ceil(2) };
    (n.div_ceil(cols), cols)
}

fn size(l: &Layout<'_>) -> (u32, u32) {
    let (rows, _) = grid(l.panels.len());
    (WIDTH_PX, HEAD_PX + ROW_PX * rows as u32)
}

/// A figure as a bar's label and the value axis show it: three significant digits or so.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3}")
    }
}

/// A value axis tick: [`short`] without trailing zeros ("5", "40k", "0.25").
fn tick(v: f64) -> String {
    let s = short(v);
    let (num, suffix) = s.split_at(s.trim_end_matches(['k', 'M']).len());
    if !num.contains('.') {
        return s;
    }
    format!(
        "{}{suffix}",
        num.trim_end_matches('0').trim_end_matches('.')
    )
}

/// `text` broken at spaces into lines no wider than `max_px` (a longer word keeps a line of
/// its own).
fn wrap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle<'_>,
    max_px: u32,
) -> anyhow::Result<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        if let Some(last) = lines.last_mut() {
            let joined = format!("{last} {word}");
            if area.estimate_text_size(&joined, style).map_err(drawing)?.0 <= max_px {
                *last = joined;
                continue;
            }
        }
        lines.push(word.to_owned());
    }
    Ok(lines)
}

/// Draws `bars` under `title`: a legend of the series, then a panel per unit (in the order
/// the units first appear), in each the groups along the x axis and one bar per series in
/// each group, in the series' colour ([`PALETTE`], in the order the series first appear: put
/// kvfabric's figures first and its baseline's second), with its value above it. The value
/// axis starts at zero. Errors on no figures, a negative or non-finite value, two figures for
/// one group and series of a unit, or more series than colours.
pub(crate) fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    bars: &[Bar],
) -> anyhow::Result<()> {
    register()?;
    let l = layout(bars)?;
    root.fill(&WHITE).map_err(drawing)?;
    let body = root.titled(title, (FAMILY, 20)).map_err(drawing)?;
    let (legend, body) = body.split_vertically(LEGEND_PX);
    draw_legend(&legend, &l.series)?;
    let areas = body.split_evenly(grid(l.panels.len()));
    for (area, panel) in areas.iter().zip(&l.panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[&str],
) -> anyhow::Result<()> {
    const BOX: i32 = 14;
    const GAP: i32 = 32;
    let style = TextStyle::from((FAMILY, 15).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let widths = series
        .iter()
        .map(|s| Ok(area.estimate_text_size(s, &style).map_err(drawing)?.0 as i32))
        .collect::<anyhow::Result<Vec<i32>>>()?;
    let total: i32 =
        widths.iter().map(|w| BOX + 6 + w).sum::<i32>() + GAP * (widths.len() as i32 - 1);
    let (w, h) = area.dim_in_pixel();
    let (mut x, y) = (((w as i32) - total) / 2, h as i32 / 2);
    for ((name, width), color) in series.iter().zip(widths).zip(PALETTE) {
        area.draw(&Rectangle::new(
            [(x, y - BOX / 2), (x + BOX, y + BOX / 2)],
            color.filled(),
        ))
        .map_err(drawing)?;
        area.draw_text(name, &style, (x + BOX + 6, y))
            .map_err(drawing)?;
        x += BOX + 6 + width + GAP;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel<'_>,
) -> anyhow::Result<()> {
    let groups = panel.groups.len();
    let label_style = TextStyle::from((FAMILY, 13).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let plot_px = area
        .dim_in_pixel()
        .0
        .saturating_sub(Y_AREA_PX + 2 * MARGIN_PX);
    let group_px = (plot_px / groups as u32).saturating_sub(10);
    let labels = panel
        .groups
        .iter()
        .map(|g| wrap(area, g, &label_style, group_px))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let lines = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
    let max = panel.bars.iter().map(|(_, b)| b.value).fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.18 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(panel.unit, (FAMILY, 16))
        .margin(MARGIN_PX)
        .x_label_area_size(lines * LINE_PX + 12)
        .y_label_area_size(Y_AREA_PX)
        .build_cartesian_2d(0f64..groups as f64, 0f64..top)
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_max_light_lines(1)
        .y_label_formatter(&|v| tick(*v))
        .label_style((FAMILY, 12))
        .draw()
        .map_err(drawing)?;
    let slots = panel.series.len() as f64;
    let value_style = TextStyle::from((FAMILY, 12).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for &(s, b) in &panel.bars {
        let g = panel
            .groups
            .iter()
            .position(|x| *x == b.group)
            .expect("laid out") as f64;
        let slot = panel.series.iter().position(|x| *x == s).expect("laid out") as f64;
        // Bars at most 0.4 of a group wide, the group's bars centred on its label.
        let width = 0.8 / slots.max(2.0);
        let x0 = g + (1.0 - slots * width) / 2.0 + slot * width;
        let x1 = x0 + width * 0.86;
        let color = PALETTE[s];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, 0.0), (x1, b.value)],
                color.filled(),
            )))
            .map_err(drawing)?;
        chart
            .draw_series(std::iter::once(
                EmptyElement::at(((x0 + x1) / 2.0, b.value))
                    + Text::new(short(b.value), (0, -3), value_style.clone()),
            ))
            .map_err(drawing)?;
    }
    // Group labels under the axis: the chart gives the backend's pixels, text on the panel
    // takes the panel's.
    let (x0, y0) = area.get_base_pixel();
    for (g, lines) in labels.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
        for (i, line) in lines.iter().enumerate() {
            let y = y - y0 + 6 + (i as u32 * LINE_PX) as i32;
            area.draw_text(line, &label_style, (x - x0, y))
                .map_err(drawing)?;
        }
    }
    Ok(())
}

/// What the charts' tests share: drawing into memory, counting a colour's pixels, writing a
/// PNG to a temporary file, finding a figure among a bench's rows.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The RGB pixels `draw` paints on a picture of `size` in memory.
    pub(crate) fn drawn(
        size: (u32, u32),
        draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> anyhow::Result<()>,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; (size.0 * size.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, size).into_drawing_area();
            draw(&root).unwrap();
            root.present().unwrap();
        }
        buf
    }

    /// How many pixels of `buf` are exactly `c`.
    pub(crate) fn count(buf: &[u8], c: RGBColor) -> usize {
        buf.chunks(3).filter(|p| *p == [c.0, c.1, c.2]).count()
    }

    /// Asserts that `write` makes a file that starts with the PNG magic.
    pub(crate) fn assert_writes_png(write: impl FnOnce(&Path) -> anyhow::Result<()>) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("kvfabric-plot-test-{}-{n}.png", std::process::id()));
        write(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    /// The value of the bar of `group` and `series` on the panel of `unit`; panics, naming
    /// the rows, if there is none.
    pub(crate) fn value_of(bars: &[Bar], group: &str, series: &str, unit: &str) -> f64 {
        bars.iter()
            .find(|b| b.group == group && b.series == series && b.unit == unit)
            .unwrap_or_else(|| panic!("no figure for {group} / {series} in {unit}: {bars:?}"))
            .value
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{assert_writes_png, count, drawn};
    use super::*;

    fn bars() -> Vec<Bar> {
        vec![
            Bar::new("1 per request", "kvfabric", 1907.0, "records/s"),
            Bar::new("1 per request", "etcd", 2250.0, "records/s"),
            Bar::new("512 per request", "kvfabric", 31983.0, "records/s"),
            Bar::new("512 per request", "etcd", 27367.0, "records/s"),
            Bar::new("linearizable", "etcd", 75.6, "p99 ms"),
            Bar::new("linearizable", "kvfabric", 7.4, "p99 ms"),
        ]
    }

    #[test]
    fn panels_groups_and_series_follow_the_rows_order() {
        let rows = bars();
        let l = layout(&rows).unwrap();
        assert_eq!(l.series, ["kvfabric", "etcd"]);
        let units: Vec<&str> = l.panels.iter().map(|p| p.unit).collect();
        assert_eq!(units, ["records/s", "p99 ms"]);
        assert_eq!(l.panels[0].groups, ["1 per request", "512 per request"]);
        assert_eq!(l.panels[1].groups, ["linearizable"]);
        // etcd listed first in the p99 panel, still the second series' slot and colour.
        assert_eq!(l.panels[1].series, [0, 1]);
        assert_eq!(l.panels[1].bars[0].0, 1);
        assert_eq!(size(&l), (WIDTH_PX, HEAD_PX + ROW_PX));
        assert_eq!(grid(4), (2, 2));
        assert_eq!(grid(3), (1, 3));
    }

    #[test]
    fn figures_a_chart_cannot_show_are_refused() {
        let err = |rows: &[Bar]| layout(rows).unwrap_err().to_string();
        assert!(err(&[]).contains("expected at least one figure"));
        let nan = [Bar::new("put", "push", f64::NAN, "ms")];
        assert!(err(&nan).contains("expected a finite value >= 0, found NaN"));
        let twice = [
            Bar::new("put", "push", 1.0, "ms"),
            Bar::new("put", "push", 2.0, "ms"),
        ];
        assert!(err(&twice).contains("found a second for put / push in ms"));
        let many: Vec<Bar> = (0..7)
            .map(|i| Bar::new("g", format!("s{i}"), 1.0, "u"))
            .collect();
        assert!(err(&many).contains("expected at most 6 series, found 7"));
    }

    #[test]
    fn a_plot_file_needs_an_existing_directory() {
        let arg = |p: &str| PlotArg {
            file: Some(PathBuf::from(p)),
        };
        assert!(PlotArg { file: None }.check().is_ok());
        assert!(arg("bench.png").check().is_ok());
        let tmp = std::env::temp_dir();
        assert!(arg(&tmp.join("bench.png").to_string_lossy())
            .check()
            .is_ok());
        let missing = arg("/nonexistent-kvfabric-dir/bench.png")
            .check()
            .unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("found no directory /nonexistent-kvfabric-dir"),
            "{missing}"
        );
        let dir = arg(&tmp.to_string_lossy()).check().unwrap_err();
        assert!(dir.to_string().contains("found a directory"), "{dir}");
    }

    #[test]
    fn short_labels_keep_three_digits() {
        assert_eq!(short(31983.0), "32.0k");
        assert_eq!(short(1907.0), "1907");
        assert_eq!(short(75.64), "75.6");
        assert_eq!(short(7.44), "7.44");
        assert_eq!(short(0.604), "0.604");
        assert_eq!(short(0.0), "0");
        assert_eq!(short(4_497_408.0), "4.50M");
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(40_000.0), "40k");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(150.0), "150");
    }

    #[test]
    fn a_bar_chart_is_a_png_with_both_series_drawn() {
        let rows = bars();
        let title = "kvfabric bench directory (test)";
        let buf = drawn(size(&layout(&rows).unwrap()), |root| {
            draw_bars(root, title, &rows)
        });
        // More than the legend's 14 x 14 box: the bars are drawn in each series' colour.
        assert!(count(&buf, KVFABRIC) > 2000, "kvfabric bars drawn");
        assert!(count(&buf, BASELINE) > 2000, "etcd bars drawn");
        assert_eq!(count(&buf, PALETTE[2]), 0, "two series, no third colour");
        assert!(count(&buf, BLACK) > 100, "axes and text drawn");
        assert_writes_png(|path| write_bars(path, title, &rows));
    }
}
