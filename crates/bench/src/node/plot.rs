//! `kvfabric bench node --plot FILE`: a PNG of the run, GB/s against concurrent clients, PUT
//! and GET side by side, one line per server; the font, colours and file writing are
//! [`crate::plot`]'s.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{Row, Server};
use crate::plot::{drawing, register, write_png, BASELINE, FAMILY, KVFABRIC, PALETTE};

const SERVERS: [(Server, RGBColor); 4] = [
    (Server::Baseline, BASELINE),
    (Server::Standalone, KVFABRIC),
    (Server::Gpu, PALETTE[3]),
    (Server::Cluster, PALETTE[2]),
];

/// Writes the PNG of `rows` to `path` (`title` above both panels).
pub(crate) fn write(path: &Path, title: &str, rows: &[Row]) -> anyhow::Result<()> {
    write_png(path, SIZE, |root| draw(root, title, rows))
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
    root.fill(&WHITE).map_err(drawing)?;
    let root = root.titled(title, (FAMILY, 20)).map_err(drawing)?;
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
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc("concurrent clients")
            .y_desc("GB/s")
            .x_labels(max_clients as usize + 1)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 14))
            .draw()
            .map_err(drawing)?;
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
                .map_err(drawing)?
                .label(server.name())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(drawing)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(drawing)?;
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::super::report::Figure;
    use super::*;
    use crate::plot::testing::{assert_writes_png, count, drawn};

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
        // Drawn into memory: the series' colours are there, the missing GPU node's and
        // cluster's are not.
        let title = "kvfabric bench node (test)";
        let buf = drawn(SIZE, |root| draw(root, title, &rows));
        assert!(count(&buf, SERVERS[0].1) > 100, "baseline drawn");
        assert!(count(&buf, SERVERS[1].1) > 100, "standalone drawn");
        for (server, colour) in &SERVERS[2..] {
            assert_eq!(
                count(&buf, *colour),
                0,
                "no {} rows, no line",
                server.name()
            );
        }
        assert!(count(&buf, BLACK) > 100, "axes and text drawn");
        // And written as a PNG file.
        assert_writes_png(|path| write(path, title, &rows));
    }
}
