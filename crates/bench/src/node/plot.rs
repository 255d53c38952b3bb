//! `kvfabric bench node --plot FILE`: a PNG of the run, GB/s against concurrent clients, PUT
//! and GET side by side, one line per server. Drawn with plotters' bitmap backend; its text
//! uses a font compiled into the binary (DejaVu Sans Mono, `crates/bench/assets`), so no
//! system font is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;

use super::report::{Row, Server};

/// The font's family name in the charts.
const FAMILY: &str = "sans-serif";
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");

fn register() -> anyhow::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| anyhow!("the embedded font does not parse"));
    });
    result
}

const SERVERS: [(Server, RGBColor); 3] = [
    (Server::Baseline, RGBColor(120, 120, 120)),
    (Server::Standalone, RGBColor(31, 119, 180)),
    (Server::Cluster, RGBColor(214, 39, 40)),
];

/// Writes the PNG of `rows` to `path` (`title` above both panels).
pub(crate) fn write(path: &Path, title: &str, rows: &[Row]) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, title, rows)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e:?}", path.display()))
}

/// A phase's GB/s of a row.
type Pick = fn(&Row) -> f64;

/// The picture's size in pixels.
const SIZE: (u32, u32) = (1100, 460);

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    rows: &[Row],
) -> anyhow::Result<()> {
    register()?;
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FAMILY, 20)).map_err(err)?;
    let panels = root.split_evenly((1, 2));
    let max_clients = rows.iter().map(|r| r.clients).max().unwrap_or(1);
    let phases: [(&str, Pick); 2] = [("PUT", |r| r.put.gbps), ("GET", |r| r.get.gbps)];
    for (panel, (name, value)) in panels.iter().zip(phases) {
        let top = rows.iter().map(value).fold(0.0, f64::max) * 1.15 + 0.05;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{name} GB/s"), (FAMILY, 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0.5f64..max_clients as f64 + 0.5, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("concurrent clients")
            .y_desc("GB/s")
            .x_labels(max_clients as usize + 1)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 14))
            .draw()
            .map_err(err)?;
        for (server, color) in SERVERS {
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.server == server)
                .map(|r| (r.clients as f64, value(r)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let style = ShapeStyle::from(&color).stroke_width(2);
            chart
                .draw_series(LineSeries::new(points.clone(), style))
                .map_err(err)?
                .label(server.name())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::super::report::Figure;
    use super::*;

    #[test]
    fn a_plot_is_a_png_with_both_panels_drawn() {
        let fig = |gbps| Figure {
            gbps,
            p50_ms: 1.0,
            p99_ms: 2.0,
        };
        let rows: Vec<Row> = [(Server::Baseline, 1.5), (Server::Standalone, 1.0)]
            .into_iter()
            .flat_map(|(server, g)| {
                [1u64, 2, 4].map(|clients| Row {
                    server,
                    clients,
                    put: fig(g * clients as f64),
                    get: fig(g),
                })
            })
            .collect();
        // Drawn into memory: the series' colours are there, the missing cluster's is not.
        let mut buf = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
            draw(&root, "kvfabric bench node (test)", &rows).unwrap();
            root.present().unwrap();
        }
        let count = |c: RGBColor| buf.chunks(3).filter(|p| *p == [c.0, c.1, c.2]).count();
        assert!(count(SERVERS[0].1) > 100, "baseline drawn");
        assert!(count(SERVERS[1].1) > 100, "standalone drawn");
        assert_eq!(count(SERVERS[2].1), 0, "no cluster rows, no cluster line");
        assert!(count(BLACK) > 100, "axes and text drawn");
        // And written as a PNG file.
        let path =
            std::env::temp_dir().join(format!("kvfabric-plot-test-{}.png", std::process::id()));
        write(&path, "kvfabric bench node (test)", &rows).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
