//! Dataset statistics: example counts per task, split and subset, label
//! balance, and histograms of graph sizes and step counts, as text and as a
//! PNG plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{Dataset, DatasetError, Record, Split, Subset, Task};

/// A histogram over fixed buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Lower bound of each bucket (inclusive); bucket `i` ends where `i + 1`
    /// starts, the last one is open.
    pub lower: Vec<u64>,
    /// Count per bucket.
    pub counts: Vec<u64>,
    /// Values added.
    pub n: u64,
    /// Their sum.
    pub sum: u64,
    /// Their minimum (`u64::MAX` while empty).
    pub min: u64,
    /// Their maximum.
    pub max: u64,
}

impl Histogram {
    fn with_bounds(lower: Vec<u64>) -> Histogram {
        let counts = vec![0; lower.len()];
        Histogram { lower, counts, n: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    /// Powers of two: [1, 2), [2, 4), … (0 falls in the first bucket).
    pub fn powers_of_two() -> Histogram {
        Histogram::with_bounds((0..31).map(|i| 1u64 << i).collect())
    }

    /// Step counts, with bucket edges at the DDF subset limits 30, 60, 200.
    pub fn steps() -> Histogram {
        Histogram::with_bounds(vec![0, 1, 2, 3, 4, 6, 11, 21, 31, 61, 101, 201, 501, 1001])
    }

    /// Adds one value.
    pub fn add(&mut self, v: u64) {
        let i = self.lower.partition_point(|&l| l <= v).saturating_sub(1);
        self.counts[i] += 1;
        self.n += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The label of bucket `i`: `5`, `6-10`, `1001+`.
    pub fn label(&self, i: usize) -> String {
        let lo = self.lower[i];
        match self.lower.get(i + 1) {
            Some(&hi) if hi == lo + 1 => lo.to_string(),
            Some(&hi) => format!("{lo}-{}", hi - 1),
            None => format!("{lo}+"),
        }
    }

    /// [`Histogram::label`] with numbers of 1000 and more in thousands
    /// (`1k-2k`), for plot axes.
    pub fn short_label(&self, i: usize) -> String {
        fn short(n: u64) -> String {
            if n < 1000 {
                n.to_string()
            } else {
                format!("{:.0}k", n as f64 / 1000.0)
            }
        }
        let lo = self.lower[i];
        match self.lower.get(i + 1) {
            Some(&hi) if hi == lo + 1 => short(lo),
            Some(&hi) => format!("{}-{}", short(lo), short(hi - 1)),
            None => format!("{}+", short(lo)),
        }
    }

    /// The buckets from the first to the last non-empty one.
    pub fn span(&self) -> std::ops::Range<usize> {
        let first = self.counts.iter().position(|&c| c > 0).unwrap_or(0);
        let last = self.counts.iter().rposition(|&c| c > 0).map_or(first, |l| l + 1);
        first..last
    }

    /// The mean, if any value was added.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    fn render(&self, out: &mut String) {
        let Some(&peak) = self.counts.iter().max().filter(|&&p| p > 0) else {
            out.push_str("    (empty)\n");
            return;
        };
        for i in self.span() {
            let bar = "#".repeat(((self.counts[i] * 40).div_ceil(peak)) as usize);
            let _ = writeln!(out, "    {:>10} {:>9}  {bar}", self.label(i), self.counts[i]);
        }
    }
}

/// Statistics of a dataset (see [`Stats::collect`]).
#[derive(Clone, Debug)]
pub struct Stats {
    /// Shards read successfully.
    pub shards: usize,
    /// Shards that could not be read: (index, error naming the shard), in
    /// shard order.
    pub shard_errors: Vec<(usize, String)>,
    /// Failed inputs recorded by the build.
    pub failures: usize,
    /// Records per split.
    pub records: BTreeMap<Split, u64>,
    /// Examples per task, split and subset.
    pub examples: BTreeMap<(Task, Split, Subset), u64>,
    /// Per task and split: positives and labelled nodes, summed over
    /// examples (their ratio is the positive share).
    pub balance: BTreeMap<(Task, Split), (u64, u64)>,
    /// Nodes per graph.
    pub nodes: Histogram,
    /// Edges per graph.
    pub edges: Histogram,
    /// Steps per example, per task.
    pub steps: BTreeMap<Task, Histogram>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            shards: 0,
            shard_errors: Vec::new(),
            failures: 0,
            records: BTreeMap::new(),
            examples: BTreeMap::new(),
            balance: BTreeMap::new(),
            nodes: Histogram::powers_of_two(),
            edges: Histogram::powers_of_two(),
            steps: Task::ALL.into_iter().map(|t| (t, Histogram::steps())).collect(),
        }
    }
}

impl Stats {
    /// Reads every shard (in parallel, one shard per worker in memory) and
    /// gathers the statistics. Unreadable shards are listed in
    /// [`Stats::shard_errors`], not fatal.
    pub fn collect(dataset: &Dataset) -> Stats {
        let mut total = (0..dataset.shards().len())
            .into_par_iter()
            .fold(Stats::default, |mut s, i| {
                match dataset.read_shard(i) {
                    Ok(records) => {
                        s.shards += 1;
                        records.iter().for_each(|r| s.add(r));
                    }
                    Err(e) => s.shard_errors.push((i, e.to_string())),
                }
                s
            })
            .reduce(Stats::default, |mut a, b| {
                a.merge(&b);
                a
            });
        total.shard_errors.sort();
        total.failures = dataset.failures().len();
        total
    }

    /// Adds one record.
    pub fn add(&mut self, r: &Record) {
        *self.records.entry(r.split).or_default() += 1;
        self.nodes.add(r.graph.node_count() as u64);
        self.edges.add(r.graph.edges.len() as u64);
        for task in Task::ALL {
            let examples = r.examples(task);
            let labelled = r.labelled_count(task) as u64;
            for e in examples {
                for subset in Subset::ALL {
                    if subset.contains(e.steps) {
                        *self.examples.entry((task, r.split, subset)).or_default() += 1;
                    }
                }
                let b = self.balance.entry((task, r.split)).or_default();
                b.0 += e.positives.len() as u64;
                b.1 += labelled;
                self.steps.entry(task).or_insert_with(Histogram::steps).add(e.steps as u64);
            }
        }
    }

    fn merge(&mut self, o: &Stats) {
        self.shards += o.shards;
        self.shard_errors.extend(o.shard_errors.iter().cloned());
        for (k, v) in &o.records {
            *self.records.entry(*k).or_default() += v;
        }
        for (k, v) in &o.examples {
            *self.examples.entry(*k).or_default() += v;
        }
        for (k, v) in &o.balance {
            let b = self.balance.entry(*k).or_default();
            b.0 += v.0;
            b.1 += v.1;
        }
        self.nodes.merge(&o.nodes);
        self.edges.merge(&o.edges);
        for (t, h) in &o.steps {
            self.steps.entry(*t).or_insert_with(Histogram::steps).merge(h);
        }
    }

    /// Examples of `task` in `split` (all splits if `None`) and `subset`.
    pub fn example_count(&self, task: Task, split: Option<Split>, subset: Subset) -> u64 {
        Split::ALL
            .into_iter()
            .filter(|s| split.is_none_or(|x| x == *s))
            .map(|s| self.examples.get(&(task, s, subset)).copied().unwrap_or(0))
            .sum()
    }

    /// The share of positive labels of `task` (all splits if `None`).
    pub fn positive_share(&self, task: Task, split: Option<Split>) -> Option<f64> {
        let (p, n) = Split::ALL
            .into_iter()
            .filter(|s| split.is_none_or(|x| x == *s))
            .filter_map(|s| self.balance.get(&(task, s)))
            .fold((0, 0), |(p, n), b| (p + b.0, n + b.1));
        (n > 0).then(|| p as f64 / n as f64)
    }

    /// The statistics as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let total: u64 = self.records.values().sum();
        let _ = writeln!(
            out,
            "records: {total} ({}) in {} shards; {} failed inputs",
            Split::ALL.iter().map(|s| format!("{s} {}", self.records.get(s).copied().unwrap_or(0))).collect::<Vec<_>>().join(", "),
            self.shards,
            self.failures
        );
        for (_, e) in &self.shard_errors {
            let _ = writeln!(out, "unreadable: {e}");
        }
        let _ = writeln!(out, "\nexamples per task, split and subset (positive share of the labelled nodes):");
        let _ = writeln!(
            out,
            "  {:<15} {:<6} {:>9} {:>9} {:>9} {:>9}  {:>8}",
            "task", "split", "DDF-30", "DDF-60", "DDF-200", "DDF", "positive"
        );
        for task in Task::ALL {
            let splits = Split::ALL.into_iter().map(Some).chain([None]);
            for split in splits {
                let counts: Vec<String> = Subset::ALL.iter().map(|&s| self.example_count(task, split, s).to_string()).collect();
                let share = self.positive_share(task, split).map_or("-".to_string(), |p| format!("{:.1}%", p * 100.0));
                let _ = writeln!(
                    out,
                    "  {:<15} {:<6} {:>9} {:>9} {:>9} {:>9}  {:>8}",
                    if split == Some(Split::Train) { task.name() } else { "" },
                    split.map_or("all", Split::name),
                    counts[0],
                    counts[1],
                    counts[2],
                    counts[3],
                    share
                );
            }
        }
        let summary = |h: &Histogram| match h.mean() {
            Some(m) => format!("min {}, mean {m:.1}, max {}", h.min, h.max),
            None => "none".to_string(),
        };
        let _ = writeln!(out, "\ngraph sizes, nodes per graph: {}", summary(&self.nodes));
        self.nodes.render(&mut out);
        let _ = writeln!(out, "edges per graph: {}", summary(&self.edges));
        self.edges.render(&mut out);
        for (task, h) in &self.steps {
            let _ = writeln!(out, "steps, {task}: {}", summary(h));
            h.render(&mut out);
        }
        out
    }

    /// Draws the statistics as a PNG: graph sizes, step counts per task,
    /// examples per task and split, positive share per task and split.
    ///
    /// Texts need a TrueType font (see [`PlotFont`]). Without one the plot is
    /// drawn without any text, and the outcome says so.
    pub fn plot(&self, path: &Path, font: PlotFont<'_>) -> Result<PlotOutcome, DatasetError> {
        let font = match font {
            PlotFont::None => None,
            PlotFont::Auto => load_font(None),
            PlotFont::File(f) => load_font(Some(f)),
        };
        // Drawn into a temporary PNG (plotters writes the file it is given
        // piecemeal, and picks the encoder by the name's extension), then
        // written atomically: a failed write leaves no partial image under
        // `path`, and a device such as /dev/null is written, not replaced.
        let plot_error = |detail: String| DatasetError::Plot { path: path.to_path_buf(), detail };
        let tmp = tempfile::Builder::new().prefix(".programl-stats.").suffix(".png").tempfile().map_err(|e| plot_error(e.to_string()))?;
        plot::draw(self, tmp.path(), font.is_some()).map_err(plot_error)?;
        let png = std::fs::read(tmp.path()).map_err(|e| plot_error(e.to_string()))?;
        programl::fsutil::write_bytes_atomically(path, programl::fsutil::Durability::Atomic, &png).map_err(DatasetError::io(path))?;
        Ok(PlotOutcome { font })
    }
}

/// Which font [`Stats::plot`] writes its texts with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlotFont<'a> {
    /// `$PROGRAML_FONT`, else the first of [`FONT_CANDIDATES`] that exists.
    #[default]
    Auto,
    /// This file, else as [`PlotFont::Auto`].
    File(&'a Path),
    /// No font: a plot without text.
    None,
}

/// How a plot was drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotOutcome {
    /// The font used for its texts; `None` if none was found, and the plot
    /// has no text.
    pub font: Option<PathBuf>,
}

/// Where [`Stats::plot`] looks for a font after `--font` and `$PROGRAML_FONT`.
pub const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers the first usable font as plotters' "sans-serif" (once per
/// process; the bytes live as long as the process).
pub fn load_font(explicit: Option<&Path>) -> Option<PathBuf> {
    static LOADED: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if loaded.is_some() {
        return loaded.clone();
    }
    let env = std::env::var_os("PROGRAML_FONT").map(PathBuf::from);
    let candidates = explicit.map(Path::to_path_buf).into_iter().chain(env).chain(FONT_CANDIDATES.iter().map(PathBuf::from));
    for candidate in candidates {
        let Ok(bytes) = std::fs::read(&candidate) else { continue };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes).is_ok() {
            *loaded = Some(candidate.clone());
            return Some(candidate);
        }
    }
    None
}

mod plot {
    use plotters::coord::Shift;
    use plotters::prelude::*;

    use super::{Histogram, Split, Stats, Subset, Task};

    type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
    type R = Result<(), String>;

    const SPLIT_COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44)];
    const TASK_COLORS: [RGBColor; 5] =
        [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(148, 103, 189), RGBColor(140, 86, 75)];

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    pub(super) fn draw(stats: &Stats, path: &std::path::Path, text: bool) -> R {
        let canvas = BitMapBackend::new(path, (1600, 1100)).into_drawing_area();
        canvas.fill(&WHITE).map_err(err)?;
        let root = canvas.margin(12, 6, 6, 6);
        let (title, body) = if text { root.split_vertically(50) } else { root.split_vertically(0) };
        if text {
            let total: u64 = stats.records.values().sum();
            let examples: u64 = Task::ALL.iter().map(|&t| stats.example_count(t, None, Subset::Ddf)).sum();
            title.titled(&format!("DeepDataFlow dataset: {total} graphs, {examples} examples"), ("sans-serif", 30)).map_err(err)?;
        }
        let panels = body.split_evenly((2, 2));
        histogram(&panels[0], &stats.nodes, "Graph size (nodes per graph)", "nodes", text)?;
        steps(&panels[1], stats, text)?;
        grouped(&panels[2], "Examples per task and split", "examples", text, |t, s| stats.example_count(t, Some(s), Subset::Ddf) as f64)?;
        grouped(&panels[3], "Positive share of the labelled nodes", "% positive", text, |t, s| {
            stats.positive_share(t, Some(s)).unwrap_or(0.0) * 100.0
        })?;
        canvas.present().map_err(err)
    }

    fn builder<'a, 'b>(area: &'a Area<'b>, caption: &str, text: bool) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
        let mut b = ChartBuilder::on(area);
        b.margin(15);
        if text {
            b.caption(caption, ("sans-serif", 22)).x_label_area_size(45).y_label_area_size(70);
        }
        b
    }

    fn histogram(area: &Area<'_>, h: &Histogram, caption: &str, unit: &str, text: bool) -> R {
        let span = h.span();
        let n = span.len().max(1);
        let peak = span.clone().map(|i| h.counts[i]).max().unwrap_or(0).max(1) as f64;
        let mut chart = builder(area, caption, text).build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..peak * 1.1).map_err(err)?;
        if text {
            let labels: Vec<String> = span.clone().map(|i| h.short_label(i)).collect();
            bucket_axes(&mut chart, &labels, unit, "graphs")?;
        }
        chart
            .draw_series(
                span.enumerate()
                    .map(|(x, i)| Rectangle::new([(x as f64 - 0.4, 0.0), (x as f64 + 0.4, h.counts[i] as f64)], SPLIT_COLORS[0].filled())),
            )
            .map_err(err)?;
        Ok(())
    }

    type Chart<'a, 'b> =
        ChartContext<'a, BitMapBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

    /// The mesh style shared by the panels: readable labels, no fine grid.
    fn mesh<'c, 'a, 'b>(
        chart: &'c mut Chart<'a, 'b>,
    ) -> plotters::chart::MeshStyle<'a, 'c, plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64, BitMapBackend<'b>>
    {
        let mut m = chart.configure_mesh();
        m.label_style(("sans-serif", 15)).axis_desc_style(("sans-serif", 16)).light_line_style(WHITE);
        m
    }

    /// Axes of a panel whose x positions are histogram buckets.
    fn bucket_axes(chart: &mut Chart<'_, '_>, labels: &[String], x_desc: &str, y_desc: &str) -> R {
        let n = labels.len();
        mesh(chart)
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| label_at(labels, *x))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_label_style(("sans-serif", if n > 10 { 12 } else { 15 }))
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(err)
    }

    fn label_at(labels: &[String], x: f64) -> String {
        let i = x.round();
        if (x - i).abs() > 0.01 || i < 0.0 {
            return String::new();
        }
        labels.get(i as usize).cloned().unwrap_or_default()
    }

    fn steps(area: &Area<'_>, stats: &Stats, text: bool) -> R {
        let template = Histogram::steps();
        let (mut first, mut last) = (usize::MAX, 0);
        for h in stats.steps.values() {
            let s = h.span();
            if !s.is_empty() {
                first = first.min(s.start);
                last = last.max(s.end);
            }
        }
        if first == usize::MAX {
            (first, last) = (0, 1);
        }
        let labels: Vec<String> = (first..last).map(|i| template.short_label(i)).collect();
        let n = labels.len();
        let mut chart = builder(area, "Steps per example (share of the task's examples)", text)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..100f64)
            .map_err(err)?;
        if text {
            bucket_axes(&mut chart, &labels, "steps", "% of the task's examples")?;
        }
        for (k, task) in Task::ALL.into_iter().enumerate() {
            let Some(h) = stats.steps.get(&task).filter(|h| h.n > 0) else { continue };
            let color = TASK_COLORS[k];
            let points: Vec<(f64, f64)> =
                (first..last).enumerate().map(|(x, i)| (x as f64, h.counts[i] as f64 * 100.0 / h.n as f64)).collect();
            let series = chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2))).map_err(err)?;
            if text {
                series.label(task.name()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            }
            chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled()))).map_err(err)?;
        }
        if text {
            chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
        }
        Ok(())
    }

    fn grouped(area: &Area<'_>, caption: &str, unit: &str, text: bool, value: impl Fn(Task, Split) -> f64) -> R {
        let peak = Task::ALL.iter().flat_map(|&t| Split::ALL.map(|s| value(t, s))).fold(0f64, f64::max).max(1e-9);
        let mut chart = builder(area, caption, text).build_cartesian_2d(-0.5f64..4.5f64, 0f64..peak * 1.15).map_err(err)?;
        if text {
            let names: Vec<String> = Task::ALL.iter().map(|t| t.name().to_string()).collect();
            mesh(&mut chart)
                .disable_x_mesh()
                .x_labels(5)
                .x_label_formatter(&|x| label_at(&names, *x))
                .y_label_formatter(&|y| if peak >= 10.0 { format!("{y:.0}") } else { format!("{y:.1}") })
                .y_desc(unit)
                .draw()
                .map_err(err)?;
        }
        for (k, split) in Split::ALL.into_iter().enumerate() {
            let color = SPLIT_COLORS[k];
            let left = -0.4 + k as f64 * 0.8 / 3.0;
            let series = chart
                .draw_series(Task::ALL.into_iter().enumerate().map(|(x, t)| {
                    Rectangle::new([(x as f64 + left, 0.0), (x as f64 + left + 0.8 / 3.0 - 0.02, value(t, split))], color.filled())
                }))
                .map_err(err)?;
            if text {
                series.label(split.name()).legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let mut h = Histogram::steps();
        for v in [0, 1, 5, 30, 31, 200, 201, 5000] {
            h.add(v);
        }
        let labels: Vec<String> = (0..h.lower.len()).map(|i| h.label(i)).collect();
        assert_eq!(labels[..6], ["0", "1", "2", "3", "4-5", "6-10"]);
        assert_eq!(labels[7..], ["21-30", "31-60", "61-100", "101-200", "201-500", "501-1000", "1001+"]);
        assert_eq!(h.counts, [1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1]);
        assert_eq!((h.n, h.min, h.max), (8, 0, 5000));
        let mut p = Histogram::powers_of_two();
        p.add(0);
        p.add(1);
        p.add(3);
        p.add(1024);
        assert_eq!(p.counts[..3], [2, 1, 0]);
        assert_eq!(p.counts[10], 1);
        assert_eq!(p.label(1), "2-3");
        assert_eq!(p.short_label(10), "1k-2k");
        assert_eq!(Histogram::steps().short_label(13), "1k+");
        assert_eq!(p.span(), 0..11);
    }
}
