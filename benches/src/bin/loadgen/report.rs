//! One scenario's results: metrics beside their baselines, written as JSON and an SVG plot.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde_json::json;

/// Which way a goal points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Bound {
    /// The measured quantity must be at most the bound.
    AtMost(f64),
    /// ...at least the bound.
    AtLeast(f64),
}

impl Bound {
    /// Whether `v` is within the bound.
    pub(crate) fn holds(self, v: f64) -> bool {
        match self {
            Bound::AtMost(x) => v <= x,
            Bound::AtLeast(x) => v >= x,
        }
    }
}

/// What a goal constrains: the ratio to the baseline, or the value itself.
#[derive(Clone, Copy)]
pub(crate) enum Goal {
    Ratio(Bound),
    Value(Bound),
    None,
}

/// One measured figure.
pub(crate) struct Metric {
    pub name: String,
    pub unit: String,
    pub ours: f64,
    /// The baseline's value and what it is.
    pub baseline: Option<(f64, String)>,
    pub goal: Goal,
    pub note: String,
    /// A published SLO of this figure: missing it fails the scenario (`cargo xtask bench`
    /// exits non-zero), after the report is written. It may be looser than the goal (a goal
    /// is judged in the report, an SLO also fails the run).
    pub slo: Option<Bound>,
}

impl Metric {
    pub(crate) fn new(name: &str, unit: &str, ours: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            ours,
            baseline: None,
            goal: Goal::None,
            note: String::new(),
            slo: None,
        }
    }

    /// Adds an SLO on the value, apart from the goal (see [`Metric::slo`]).
    pub(crate) fn slo_at(mut self, bound: Bound) -> Self {
        self.slo = Some(bound);
        self
    }

    /// Whether the value meets its SLO (`None` without one).
    pub(crate) fn slo_met(&self) -> Option<bool> {
        self.slo.map(|b| b.holds(self.ours))
    }

    pub(crate) fn baseline(mut self, value: f64, what: &str) -> Self {
        self.baseline = Some((value, what.into()));
        self
    }

    pub(crate) fn goal(mut self, goal: Goal) -> Self {
        self.goal = goal;
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub(crate) fn ratio(&self) -> Option<f64> {
        self.baseline
            .as_ref()
            .filter(|(b, _)| *b != 0.0)
            .map(|(b, _)| self.ours / b)
    }

    pub(crate) fn met(&self) -> Option<bool> {
        match self.goal {
            Goal::Ratio(b) => self.ratio().map(|r| b.holds(r)),
            Goal::Value(b) => Some(b.holds(self.ours)),
            Goal::None => None,
        }
    }

    fn goal_text(&self) -> String {
        let b = |b: Bound| match b {
            Bound::AtMost(x) => format!("≤ {}", fmt_num(x)),
            Bound::AtLeast(x) => format!("≥ {}", fmt_num(x)),
        };
        let text = match self.goal {
            Goal::Ratio(x) => format!("ratio {}", b(x)),
            Goal::Value(x) => format!("{} {}", b(x), self.unit),
            Goal::None => "—".into(),
        };
        match (self.slo, self.goal) {
            (None, _) => text,
            (Some(s), Goal::Value(g)) if s == g => format!("SLO {text}"),
            (Some(s), Goal::None) => format!("SLO {} {}", b(s), self.unit),
            (Some(s), _) => format!("{text}; SLO {} {}", b(s), self.unit),
        }
    }
}

pub(crate) fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// The median and range of one figure over several rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// The spread of `v` (NaN figures when `v` is empty); the median of an even count is the
    /// mean of the middle two.
    pub(crate) fn of(v: &[f64]) -> Self {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => s[n / 2],
            _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        };
        Self {
            median,
            min: s.first().copied().unwrap_or(f64::NAN),
            max: s.last().copied().unwrap_or(f64::NAN),
            n,
        }
    }

    /// `median unit (range min–max, n rounds)`.
    pub(crate) fn text(&self, unit: &str) -> String {
        let u = if unit.is_empty() {
            String::new()
        } else {
            format!(" {unit}")
        };
        format!(
            "{}{u} (range {}–{}, {} rounds)",
            fmt_num(self.median),
            fmt_num(self.min),
            fmt_num(self.max),
            self.n
        )
    }
}

/// A scenario's report.
pub(crate) struct Report {
    pub id: String,
    pub title: String,
    /// How the scenario was scaled from the numbers, if it was.
    pub scale: String,
    pub metrics: Vec<Metric>,
    pub notes: Vec<String>,
    pub seconds: f64,
}

impl Report {
    /// A report; a run scaled down by `$LISTWATCH_BENCH_SCALE` says so in its scale.
    pub(crate) fn new(id: &str, title: &str, scale: &str) -> Self {
        let f = crate::meta::scale();
        let scale = if f < 1.0 {
            let down = format!(
                "SCALED DOWN by LISTWATCH_BENCH_SCALE={f} (sizes, rounds and durations; not a result)"
            );
            if scale.is_empty() {
                down
            } else {
                format!("{down}; {scale}")
            }
        } else {
            scale.to_owned()
        };
        Self {
            id: id.into(),
            title: title.into(),
            scale,
            metrics: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
        }
    }

    /// The SLO figures that missed their goal.
    pub(crate) fn missed_slos(&self) -> Vec<String> {
        self.metrics
            .iter()
            .filter(|m| m.slo_met() == Some(false))
            .map(|m| {
                format!(
                    "{}: {} {} ({})",
                    m.name,
                    fmt_num(m.ours),
                    m.unit,
                    m.goal_text()
                )
            })
            .collect()
    }

    pub(crate) fn push(&mut self, m: Metric) {
        eprintln!(
            "  {}: {} {}{}{}",
            m.name,
            fmt_num(m.ours),
            m.unit,
            m.baseline
                .as_ref()
                .map(|(b, w)| format!(" | baseline ({w}) {}", fmt_num(*b)))
                .unwrap_or_default(),
            m.ratio()
                .map(|r| format!(" | ratio {}", fmt_num(r)))
                .unwrap_or_default()
        );
        self.metrics.push(m);
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "id": self.id,
            "title": self.title,
            "command": format!("cargo xtask bench {}", self.id),
            "scale": self.scale,
            "seconds": self.seconds,
            "machine": machine(),
            "run": crate::meta::run(),
            "notes": self.notes,
            "metrics": self.metrics.iter().map(|m| json!({
                "name": m.name,
                "unit": m.unit,
                "ours": m.ours,
                "baseline": m.baseline.as_ref().map(|(v, _)| *v),
                "baseline_is": m.baseline.as_ref().map(|(_, w)| w.clone()),
                "ratio": m.ratio(),
                "goal": m.goal_text(),
                "goal_met": m.met(),
                "slo": m.slo.is_some(),
                "slo_met": m.slo_met(),
                "note": m.note,
            })).collect::<Vec<_>>(),
        })
    }

    /// The Markdown table of this report (pasted into docs/benchmarks.md).
    pub(crate) fn to_markdown(&self) -> String {
        let mut s = format!(
            "### {} — {}\n\n`cargo xtask bench {}`",
            self.id, self.title, self.id
        );
        if !self.scale.is_empty() {
            let _ = write!(s, " — scale: {}", self.scale);
        }
        let _ = write!(
            s,
            "\n\n![{}](bench/{}.svg)\n\n| figure | ours | baseline | ratio | goal | met |\n| --- | --- | --- | --- | --- | --- |\n",
            self.id, self.id
        );
        for m in &self.metrics {
            let _ = writeln!(
                s,
                "| {} | {} {} | {} | {} | {} | {} |",
                m.name,
                fmt_num(m.ours),
                m.unit,
                m.baseline
                    .as_ref()
                    .map(|(b, w)| format!("{} ({w})", fmt_num(*b)))
                    .unwrap_or_else(|| "—".into()),
                m.ratio().map(fmt_num).unwrap_or_else(|| "—".into()),
                m.goal_text(),
                match m.met() {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "—",
                }
            );
        }
        for n in &self.notes {
            let _ = write!(s, "\n{n}\n");
        }
        s
    }

    /// Writes `<dir>/<id>.json`, `<dir>/<id>.md` and `<dir>/<id>.svg`.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let json = serde_json::to_string_pretty(&self.to_json()).map_err(|e| e.to_string())?;
        let p = dir.join(format!("{}.json", self.id));
        std::fs::write(&p, json + "\n")
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        let p = dir.join(format!("{}.md", self.id));
        std::fs::write(&p, self.to_markdown())
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        let p = dir.join(format!("{}.svg", self.id));
        self.plot(&p)
            .map_err(|e| format!("cannot plot {}: {e}", p.display()))
    }

    /// One horizontal bar per figure: ours relative to the baseline (or to the goal's bound
    /// where there is no baseline), with the goal drawn as a red tick and 1.0 (the baseline)
    /// as a black line. Each bar is labelled with its figure's name and its ratio.
    fn plot(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let rows: Vec<(String, f64, Option<f64>)> = self
            .metrics
            .iter()
            .filter_map(|m| {
                let bound = |b: Bound| match b {
                    Bound::AtMost(x) | Bound::AtLeast(x) => x,
                };
                match (m.ratio(), m.goal, &m.baseline) {
                    (Some(r), Goal::Ratio(b), _) => Some((m.name.clone(), r, Some(bound(b)))),
                    (Some(r), Goal::Value(b), Some((base, _))) => {
                        Some((m.name.clone(), r, Some(bound(b) / base)))
                    }
                    (Some(r), _, _) => Some((m.name.clone(), r, None)),
                    (None, Goal::Value(b), _) if bound(b) != 0.0 => {
                        Some((format!("{} (÷ goal)", m.name), m.ours / bound(b), Some(1.0)))
                    }
                    _ => None,
                }
            })
            .collect();
        let n = rows.len().max(1);
        let root = SVGBackend::new(path, (900, 90 + 56 * n as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let max = rows
            .iter()
            .map(|(_, r, g)| r.max(g.unwrap_or(0.0)))
            .fold(1.0f64, f64::max)
            * 1.2;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{} — {}", self.id, self.title), ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(8)
            .build_cartesian_2d(0f64..max, 0f64..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("ours ÷ baseline   (black: baseline = 1; red: goal)")
            .draw()?;
        // The first figure on top.
        let y_of = |i: usize| (n - 1 - i) as f64;
        chart.draw_series(rows.iter().enumerate().map(|(i, (_, r, _))| {
            let y = y_of(i);
            Rectangle::new([(0.0, y + 0.08), (*r, y + 0.5)], BLUE.mix(0.45).filled())
        }))?;
        chart.draw_series(rows.iter().enumerate().filter_map(|(i, (_, _, g))| {
            let y = y_of(i);
            g.map(|g| PathElement::new(vec![(g, y + 0.02), (g, y + 0.56)], RED.stroke_width(3)))
        }))?;
        chart.draw_series(rows.iter().enumerate().map(|(i, (label, r, _))| {
            let short: String = if label.chars().count() > 95 {
                label.chars().take(94).chain(std::iter::once('…')).collect()
            } else {
                label.clone()
            };
            Text::new(
                format!("{short}: {}×", fmt_num(*r)),
                (max * 0.005, y_of(i) + 0.9),
                ("sans-serif", 13),
            )
        }))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, n as f64)],
            BLACK.stroke_width(1),
        )))?;
        root.present()?;
        Ok(())
    }
}

fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default();
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_on_ratios_and_values_are_judged_in_their_direction() {
        let m = Metric::new("x", "µs", 3.0).baseline(2.0, "b");
        assert_eq!(m.ratio(), Some(1.5));
        assert_eq!(m.met(), None);
        let at_most = |b| {
            Metric::new("x", "µs", 3.0)
                .baseline(2.0, "b")
                .goal(Goal::Ratio(Bound::AtMost(b)))
        };
        assert_eq!(at_most(1.5).met(), Some(true));
        assert_eq!(at_most(1.4).met(), Some(false));
        let at_least = Metric::new("x", "/s", 30.0)
            .baseline(10.0, "b")
            .goal(Goal::Ratio(Bound::AtLeast(5.0)));
        assert_eq!(at_least.met(), Some(false));
        let value = Metric::new("x", "ms", 12.0).goal(Goal::Value(Bound::AtMost(20.0)));
        assert_eq!(value.ratio(), None);
        assert_eq!(value.met(), Some(true));
        // A ratio goal without a baseline cannot be judged.
        assert_eq!(
            Metric::new("x", "ms", 1.0)
                .goal(Goal::Ratio(Bound::AtMost(1.0)))
                .met(),
            None
        );
    }

    #[test]
    fn an_slo_apart_from_the_goal_is_judged_on_its_own() {
        // p99 3 ms: misses a 2 ms goal, meets a 20 ms SLO; the run does not fail.
        let m = Metric::new("p99", "ms", 3.0)
            .goal(Goal::Value(Bound::AtMost(2.0)))
            .slo_at(Bound::AtMost(20.0));
        assert_eq!((m.met(), m.slo_met()), (Some(false), Some(true)));
        assert_eq!(m.goal_text(), "≤ 2.00 ms; SLO ≤ 20.0 ms");
        let mut r = Report::new("P0", "t", "");
        r.push(m);
        assert!(r.missed_slos().is_empty());
        // 25 ms misses both, and fails the run.
        r.push(
            Metric::new("p99", "ms", 25.0)
                .goal(Goal::Value(Bound::AtMost(2.0)))
                .slo_at(Bound::AtMost(20.0)),
        );
        assert_eq!(r.missed_slos().len(), 1);
        // An SLO equal to the goal is shown once.
        let same = Metric::new("p99", "ms", 25.0)
            .goal(Goal::Value(Bound::AtMost(20.0)))
            .slo_at(Bound::AtMost(20.0));
        assert_eq!(
            (same.slo_met(), same.goal_text().as_str()),
            (Some(false), "SLO ≤ 20.0 ms")
        );
        // No SLO: never a failed run.
        assert_eq!(Metric::new("x", "ms", 1e9).slo_met(), None);
    }

    #[test]
    fn a_spread_has_the_median_and_the_range_of_its_rounds() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(s.text("µs"), "2.00 µs (range 1.00–3.00, 3 rounds)");
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn a_report_is_written_as_json_markdown_and_svg() {
        let dir = std::env::temp_dir().join(format!("loadgen-report-{}", std::process::id()));
        let mut r = Report::new("P0", "a test scenario", "small");
        r.push(
            Metric::new("cost", "ns", 30.0)
                .baseline(10.0, "bare")
                .goal(Goal::Ratio(Bound::AtMost(2.0))),
        );
        r.push(Metric::new("latency", "ms", 5.0).goal(Goal::Value(Bound::AtMost(20.0))));
        r.write(&dir).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("P0.json")).unwrap()).unwrap();
        assert_eq!(json["command"], "cargo xtask bench P0");
        assert_eq!(json["metrics"][0]["ratio"], 3.0);
        assert_eq!(json["metrics"][0]["goal_met"], false);
        assert_eq!(json["metrics"][1]["goal_met"], true);
        // Item 5 of issue 31: every results file says what it was measured on.
        for key in ["commit", "date"] {
            assert!(json["run"].get(key).is_some(), "{key}: {json}");
        }
        assert!(json["run"]["machine"]["kernel"].is_string(), "{json}");
        assert!(json["run"]["versions"].get("etcd").is_some(), "{json}");
        let md = std::fs::read_to_string(dir.join("P0.md")).unwrap();
        assert!(
            md.contains("`cargo xtask bench P0`")
                && md.contains("**no**")
                && md.contains("bench/P0.svg"),
            "{md}"
        );
        let svg = std::fs::read_to_string(dir.join("P0.svg")).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("cost: 3.00×"),
            "{svg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
