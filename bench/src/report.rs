//! The table: one row per (scenario, system), the median (and p99 where
//! asked) of repeated measurements, and the ratio sessctl/anchor measured in
//! the same run. Owns formatting only; never measures.

use serde_json::{json, Value};

/// Which way a number is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub system: String,
    pub unit: &'static str,
    pub better: Better,
    pub samples: usize,
    pub median: f64,
    pub p99: Option<f64>,
    /// sessctl's median over this row's; `None` on sessctl's own row.
    pub ratio: Option<f64>,
}

/// The median and nearest-rank p99 of `samples` (not empty).
fn summarize(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
    (median, samples[rank - 1])
}

/// One scenario's rows: sessctl first, then its anchors.
#[derive(Debug)]
pub struct Group {
    pub scenario: String,
    pub unit: &'static str,
    pub better: Better,
    pub with_p99: bool,
    pub systems: Vec<(String, Vec<f64>)>,
}

impl Group {
    pub fn new(scenario: impl Into<String>, unit: &'static str, better: Better) -> Group {
        Group {
            scenario: scenario.into(),
            unit,
            better,
            with_p99: false,
            systems: Vec::new(),
        }
    }

    pub fn p99(mut self) -> Group {
        self.with_p99 = true;
        self
    }

    pub fn add(&mut self, system: impl Into<String>, samples: Vec<f64>) {
        self.systems.push((system.into(), samples));
    }

    pub fn rows(self) -> Vec<Row> {
        let mut out = Vec::new();
        let mut sessctl = None;
        for (system, mut samples) in self.systems {
            if samples.is_empty() {
                continue;
            }
            let (median, p99) = summarize(&mut samples);
            // Anchors compare with the group's first sessctl row; a later
            // sessctl row (another view of the same run) has no ratio.
            let ratio = if system.starts_with("sessctl") {
                sessctl = sessctl.or(Some(median));
                None
            } else {
                // No ratio over a zero (a count of failures, say).
                sessctl.map(|s| s / median).filter(|r| r.is_finite())
            };
            out.push(Row {
                scenario: self.scenario.clone(),
                system,
                unit: self.unit,
                better: self.better,
                samples: samples.len(),
                median,
                p99: self.with_p99.then_some(p99),
                ratio,
            });
        }
        out
    }
}

fn number(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

pub fn print(rows: &[Row]) {
    let sw = rows
        .iter()
        .map(|r| r.scenario.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let yw = rows
        .iter()
        .map(|r| r.system.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<sw$} {:<yw$} {:<22} {:>5} {:>12} {:>12} {:>14}",
        "scenario", "system", "unit (better)", "n", "median", "p99", "sessctl/anchor"
    );
    let mut last = "";
    for r in rows {
        if r.scenario != last && !last.is_empty() {
            println!();
        }
        last = &r.scenario;
        println!(
            "{:<sw$} {:<yw$} {:<22} {:>5} {:>12} {:>12} {:>14}",
            r.scenario,
            r.system,
            format!("{} ({})", r.unit, r.better.as_str()),
            r.samples,
            number(r.median),
            r.p99.map(number).unwrap_or_else(|| "-".into()),
            r.ratio
                .map(|x| if x >= 0.1 {
                    format!("{x:.2}x")
                } else {
                    format!("{x:.4}x")
                })
                .unwrap_or_else(|| "-".into()),
        );
    }
}

pub fn to_json(rows: &[Row], sizes: Value) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "scenario": r.scenario,
                "system": r.system,
                "unit": r.unit,
                "better": r.better.as_str(),
                "samples": r.samples,
                "median": r.median,
                "p99": r.p99,
                "ratio_sessctl_over_anchor": r.ratio,
            })
        })
        .collect();
    json!({"sizes": sizes, "rows": rows})
}

/// Appends a group's rows, and shows them on stderr as they come (a long
/// run's progress).
pub fn emit(out: &mut Vec<Row>, g: Group) {
    for r in g.rows() {
        eprintln!(
            "sessctl-bench: {}: {}: {} {}",
            r.scenario,
            r.system,
            number(r.median),
            r.unit
        );
        out.push(r);
    }
}
