//! `curves.png`: training loss and validation F1 against examples seen.

use std::path::Path;

use plotters::prelude::*;

use crate::train::Row;

/// Draws the plot into a file beside `path` and renames it into place: a
/// kill or a full disk leaves the old plot whole, never a cut-short one.
pub fn curves(path: &Path, rows: &[Row], title: &str) -> Result<(), String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "curves.png".into(), |n| n.to_string_lossy().into_owned());
    // The image's format is chosen by the extension: it stays `.png`.
    let staged = dir.join(format!(".{name}.{}.tmp.png", std::process::id()));
    let drawn = draw(&staged, rows, title).and_then(|()| std::fs::rename(&staged, path).map_err(|e| e.to_string()));
    if drawn.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    drawn
}

fn draw(path: &Path, rows: &[Row], title: &str) -> Result<(), String> {
    let text = programl_dataset::stats::load_font(None).is_some();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let canvas = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    canvas.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = canvas.split_evenly((1, 2));
    let max_x = rows.iter().map(|r| r.examples).max().unwrap_or(1).max(1) as f64;
    let train: Vec<(f64, f64)> =
        rows.iter().filter(|r| r.kind == "train" && r.loss.is_finite()).map(|r| (r.examples as f64, r.loss)).collect();
    let val_loss: Vec<(f64, f64)> =
        rows.iter().filter(|r| r.kind == "val" && r.loss.is_finite()).map(|r| (r.examples as f64, r.loss)).collect();
    let val_f1: Vec<(f64, f64)> = rows.iter().filter(|r| r.kind == "val").filter_map(|r| Some((r.examples as f64, r.f1?))).collect();
    let max_loss = train.iter().chain(&val_loss).map(|p| p.1).fold(0.0f64, f64::max).max(1e-3) * 1.05;
    for (i, panel) in panels.iter().enumerate() {
        let mut b = ChartBuilder::on(panel);
        b.margin(15);
        if text {
            let caption = if i == 0 { format!("{title}: cross-entropy loss") } else { format!("{title}: validation F1") };
            b.caption(caption, ("sans-serif", 20)).x_label_area_size(40).y_label_area_size(55);
        }
        let y = if i == 0 { 0.0..max_loss } else { 0.0..1.0 };
        let mut chart = b.build_cartesian_2d(0.0..max_x, y).map_err(|e| err(&e))?;
        if text {
            chart.configure_mesh().x_desc("examples seen").y_desc(if i == 0 { "loss" } else { "F1" }).draw().map_err(|e| err(&e))?;
        }
        if i == 0 {
            chart
                .draw_series(LineSeries::new(train.clone(), &BLUE))
                .map_err(|e| err(&e))?
                .label("train (window mean)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
            chart
                .draw_series(LineSeries::new(val_loss.clone(), &RED))
                .map_err(|e| err(&e))?
                .label("val")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
            if text {
                chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| err(&e))?;
            }
        } else {
            chart.draw_series(LineSeries::new(val_f1.clone(), &RED)).map_err(|e| err(&e))?;
            chart.draw_series(val_f1.iter().map(|&p| Circle::new(p, 3, RED.filled()))).map_err(|e| err(&e))?;
        }
    }
    canvas.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Row> {
        let row = |kind: &str, examples, loss, f1| Row {
            kind: kind.into(),
            examples,
            wall_s: 1.0,
            loss,
            precision: f1,
            recall: f1,
            f1,
            steps_run: None,
            steps_needed: None,
        };
        vec![row("train", 10, 0.9, None), row("val", 10, 0.8, Some(0.5)), row("train", 20, 0.5, None), row("val", 20, 0.4, Some(0.7))]
    }

    /// A plot replaces the old one whole, and one that cannot be written
    /// leaves the old one as it was (was: written in place, so a full disk
    /// left a cut-short PNG).
    #[test]
    fn a_plot_replaces_the_old_one_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curves.png");
        curves(&path, &rows(), "t").unwrap();
        let first = std::fs::read(&path).unwrap();
        assert!(first.starts_with(b"\x89PNG\r\n\x1a\n") && first.len() > 1000, "{} bytes", first.len());
        let staged = dir.path().join(format!(".curves.png.{}.tmp.png", std::process::id()));
        std::fs::create_dir(&staged).unwrap();
        assert!(curves(&path, &rows()[..2], "t").is_err(), "the staged name is a directory");
        assert_eq!(std::fs::read(&path).unwrap(), first);
        std::fs::remove_dir(&staged).unwrap();
        curves(&path, &rows()[..2], "t").unwrap();
        assert_ne!(std::fs::read(&path).unwrap(), first);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("curves.png")]);
    }
}
