//! One process's figure is not the crate's: code layout, where the allocator puts the
//! header buffers, and which core the process lands on move a ratio by several percent
//! from one process to the next. This runs the bench binary `n` times, one after another,
//! and reports each process's ratios, the median over processes and the range.

use std::process::{Command, Stdio};
use std::time::Instant;

/// The prefix of the final line of a process's output, and of this run's.
const FINAL: &str = "overhead ";

/// One process's final line: its ratios by name, in order.
struct Ratios(Vec<(String, f64)>);

impl Ratios {
    fn parse(line: &str) -> Self {
        let pairs = line.strip_prefix(FINAL).unwrap_or(line).split_whitespace();
        Ratios(
            pairs
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    Some((key.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> f64 {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map_or(f64::NAN, |&(_, v)| v)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Runs this binary `n` times with `OVERHEAD_PROCESSES=1` and the same arguments; prints
/// each process's ratios, the tables of the process whose `ratio_vs_static` is the median,
/// and the final line: the median over processes of each ratio, then each one's range.
pub(crate) fn run(n: usize) {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    println!("overhead: {n} processes of this bench, one after another (OVERHEAD_PROCESSES={n})");
    let mut runs: Vec<(Ratios, String)> = Vec::with_capacity(n);
    for i in 1..=n {
        let started = Instant::now();
        let out = Command::new(&exe)
            .args(&args)
            .env("OVERHEAD_PROCESSES", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("start the bench binary");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "process {i} of the bench failed ({}):\n{stdout}",
            out.status
        );
        let last = stdout
            .lines()
            .rfind(|l| l.starts_with(FINAL))
            .unwrap_or_else(|| panic!("process {i} printed no final line:\n{stdout}"));
        println!(
            "process {i}/{n} ({:.0} s): {}",
            started.elapsed().as_secs_f64(),
            last.strip_prefix(FINAL).unwrap_or(last)
        );
        runs.push((Ratios::parse(last), stdout));
    }

    let keys: Vec<String> = runs[0].0.0.iter().map(|(k, _)| k.clone()).collect();
    let values = |key: &str| -> Vec<f64> { runs.iter().map(|(r, _)| r.get(key)).collect() };
    let mid = median(values("ratio_vs_static"));
    let (_, tables) = runs
        .iter()
        .min_by(|a, b| {
            let d = |r: &Ratios| (r.get("ratio_vs_static") - mid).abs();
            d(&a.0).total_cmp(&d(&b.0))
        })
        .expect("at least one process");
    println!();
    println!("the process whose ratio_vs_static is the median:");
    for line in tables.lines().filter(|l| !l.starts_with(FINAL)) {
        println!("{line}");
    }
    println!();
    let mut line = String::from(FINAL.trim_end());
    for key in &keys {
        line += &format!(" {key}={:.3}", median(values(key)));
    }
    line += &format!(" processes={n}");
    for key in &keys {
        let v = values(key);
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        line += &format!(" {key}_range={lo:.3}..{hi:.3}");
    }
    println!("{line}");
}
