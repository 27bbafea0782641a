//! The verdict on one family's measurements: does its cost grow faster than its size, and
//! does any request exceed its budget?
//!
//! Invariants: a family is judged from its measured points alone (no timing thresholds
//! elsewhere); the growth check compares the last two sizes (the smallest is dominated by the
//! fixed cost of a request) and only when the larger cost is above the noise floor, so noise
//! on cheap requests cannot fail a family; the budget check judges every point, with the
//! memory budget never below its floor.

/// What one size of a family cost, the median of its rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The size factor (1, 4, 16, ...).
    pub factor: u64,
    /// The input's bytes: request line and body, plus the stored objects the request reads
    /// or patches. Growth is judged against the ratio of these.
    pub bytes: u64,
    /// Response body bytes.
    pub response_bytes: u64,
    /// Server CPU seconds per request.
    pub cpu: f64,
    /// Server peak RSS growth during one request, bytes.
    pub mem: u64,
    /// The smallest CPU difference per request the measurement resolves (one /proc tick over
    /// the requests of a round); growth below 3 × this is noise.
    pub cpu_resolution: f64,
}

/// The stated budgets and tolerances; [`Budgets::DEFAULT`] is what docs/endpoints.md states.
#[derive(Clone, Copy, Debug)]
pub struct Budgets {
    /// Most server CPU one request may take, seconds.
    pub cpu_per_request: f64,
    /// Most peak RSS growth one request may cause, as a multiple of its bytes (request body,
    /// stored object and response)...
    pub mem_per_byte: f64,
    /// ...but never less than this many bytes (allocator and runtime noise).
    pub mem_floor: u64,
    /// The growth check fails when cost grows by more than `tolerance` × the size ratio.
    pub tolerance: f64,
    /// CPU below this (seconds per request) at the larger size is noise: no growth verdict.
    pub cpu_noise: f64,
    /// Memory below this (bytes) at the larger size is noise: no growth verdict.
    pub mem_noise: u64,
    /// A response below this (bytes) at the larger size is noise: no growth verdict.
    pub bytes_noise: u64,
}

impl Budgets {
    pub const DEFAULT: Budgets = Budgets {
        cpu_per_request: 0.050,
        mem_per_byte: 20.0,
        mem_floor: 16 << 20,
        tolerance: 2.0,
        cpu_noise: 0.005,
        mem_noise: 8 << 20,
        bytes_noise: 64 << 10,
    };
}

/// The verdict on one family.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// cost(largest) / cost(second largest) ÷ size ratio, for CPU; `None` below the noise floor.
    pub cpu_excess: Option<f64>,
    /// The same for memory.
    pub mem_excess: Option<f64>,
    /// The same for response bytes.
    pub bytes_excess: Option<f64>,
    /// Why the family fails; empty when it passes.
    pub failures: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Ratio of ratios: how much faster than the size the cost grew between `a` and `b`
/// (1.0: linear; 4.0 for a quadratic series at 4× size steps). `None` when the cost at `b`
/// is below `noise` or the sizes do not grow.
pub fn excess(size_a: f64, cost_a: f64, size_b: f64, cost_b: f64, noise: f64) -> Option<f64> {
    if cost_b < noise || size_b <= size_a || size_a <= 0.0 {
        return None;
    }
    // A cost at `a` below the noise floor is taken as the floor: the growth is then at most
    // what it could be, never an artefact of dividing by a near-zero tick count.
    let base = cost_a.max(noise / 4.0);
    Some((cost_b / base) / (size_b / size_a))
}

/// Judges `points` (ascending sizes) against `b`.
pub fn judge(points: &[Point], b: &Budgets) -> Verdict {
    let mut failures = Vec::new();
    let (mut cpu_excess, mut mem_excess, mut bytes_excess) = (None, None, None);
    if let [.., p, q] = points {
        let (sa, sb) = (p.bytes as f64, q.bytes as f64);
        let ratio = sb / sa.max(1.0);
        let cpu_noise = b
            .cpu_noise
            .max(3.0 * q.cpu_resolution.max(p.cpu_resolution));
        cpu_excess = excess(sa, p.cpu, sb, q.cpu, cpu_noise);
        mem_excess = excess(sa, p.mem as f64, sb, q.mem as f64, b.mem_noise as f64);
        bytes_excess = excess(
            sa,
            p.response_bytes as f64,
            sb,
            q.response_bytes as f64,
            b.bytes_noise as f64,
        );
        if let Some(x) = cpu_excess.filter(|x| *x > b.tolerance) {
            failures.push(format!(
                "CPU grows super-linearly: {:.1} ms → {:.1} ms for {ratio:.1}× the input ({x:.1}× linear, tolerance {}×)",
                p.cpu * 1e3,
                q.cpu * 1e3,
                b.tolerance
            ));
        }
        if let Some(x) = mem_excess.filter(|x| *x > b.tolerance) {
            failures.push(format!(
                "memory grows super-linearly: {} → {} for {ratio:.1}× the input ({x:.1}× linear, tolerance {}×)",
                mib(p.mem),
                mib(q.mem),
                b.tolerance
            ));
        }
        if let Some(x) = bytes_excess.filter(|x| *x > b.tolerance) {
            failures.push(format!(
                "response grows super-linearly: {} → {} bytes for {ratio:.1}× the input ({x:.1}× linear, tolerance {}×)",
                p.response_bytes, q.response_bytes, b.tolerance
            ));
        }
    }
    for p in points {
        if p.cpu > b.cpu_per_request {
            failures.push(format!(
                "{}×: {:.1} ms CPU per request, over the {:.0} ms budget",
                p.factor,
                p.cpu * 1e3,
                b.cpu_per_request * 1e3
            ));
        }
        let budget = mem_budget(p, b);
        if p.mem > budget {
            failures.push(format!(
                "{}×: peak RSS grew {}, over the budget of {} (max({}, {}× the {} bytes in and out))",
                p.factor,
                mib(p.mem),
                mib(budget),
                mib(b.mem_floor),
                b.mem_per_byte,
                p.bytes + p.response_bytes
            ));
        }
    }
    Verdict {
        cpu_excess,
        mem_excess,
        bytes_excess,
        failures,
    }
}

/// The memory budget of one point: `mem_per_byte` × its bytes in and out, at least the floor.
pub fn mem_budget(p: &Point, b: &Budgets) -> u64 {
    let by_size = ((p.bytes + p.response_bytes) as f64 * b.mem_per_byte) as u64;
    by_size.max(b.mem_floor)
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(cost: impl Fn(f64) -> f64) -> Vec<Point> {
        [1u64, 4, 16]
            .iter()
            .map(|&f| Point {
                factor: f,
                bytes: 10_000 * f,
                response_bytes: 0,
                cpu: cost(f as f64),
                mem: (cost(f as f64) * 1e8) as u64,
                cpu_resolution: 0.0001,
            })
            .collect()
    }

    #[test]
    fn a_linear_series_passes() {
        let v = judge(&series(|f| 0.002 * f), &Budgets::DEFAULT);
        assert!(v.passed(), "{v:?}");
        let x = v.cpu_excess.unwrap();
        assert!((x - 1.0).abs() < 1e-9, "{x}");
    }

    #[test]
    fn a_quadratic_series_fails_on_growth() {
        // 0.2 ms, 3.2 ms, 51 ms: super-linear, and its 16× point is over the CPU budget too.
        let v = judge(&series(|f| 0.0002 * f * f), &Budgets::DEFAULT);
        assert!(!v.passed());
        let x = v.cpu_excess.unwrap();
        assert!((x - 4.0).abs() < 1e-9, "{x}");
        assert!(v.failures[0].contains("CPU grows super-linearly"), "{v:?}");
    }

    #[test]
    fn a_quadratic_series_within_the_budget_still_fails() {
        // 0.08, 1.3, 20 ms: every request within the budget, but the growth is quadratic.
        let v = judge(&series(|f| 0.00008 * f * f), &Budgets::DEFAULT);
        assert_eq!(v.failures.len(), 1, "{v:?}");
        assert!(v.failures[0].contains("super-linearly"));
    }

    #[test]
    fn noise_below_the_floor_gets_no_growth_verdict() {
        // 0.1 ms then 2 ms: 20× for 4× the size, but below the 5 ms noise floor.
        let pts = vec![
            Point {
                factor: 4,
                bytes: 1,
                response_bytes: 0,
                cpu: 0.0001,
                mem: 0,
                cpu_resolution: 0.0,
            },
            Point {
                factor: 16,
                bytes: 4,
                response_bytes: 0,
                cpu: 0.002,
                mem: 0,
                cpu_resolution: 0.0,
            },
        ];
        let v = judge(&pts, &Budgets::DEFAULT);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.cpu_excess, None);
    }

    #[test]
    fn a_response_growing_quadratically_fails() {
        let mut pts = series(|f| 0.001 * f);
        for p in &mut pts {
            p.response_bytes = 1000 * p.factor * p.factor;
        }
        let v = judge(&pts, &Budgets::DEFAULT);
        assert_eq!(v.failures.len(), 1, "{v:?}");
        assert!(
            v.failures[0].starts_with("response grows super-linearly"),
            "{v:?}"
        );
    }

    #[test]
    fn a_coarse_measurement_gets_no_growth_verdict() {
        // One request a round (a 1 s watch): 0 then 10 ms is one /proc tick, not growth.
        let mut pts = series(|f| if f >= 16.0 { 0.010 } else { 0.0 });
        for p in &mut pts {
            p.cpu_resolution = 0.010;
        }
        let v = judge(&pts, &Budgets::DEFAULT);
        assert!(v.passed(), "{v:?}");
        assert_eq!(v.cpu_excess, None);
    }

    #[test]
    fn one_request_over_the_cpu_budget_fails() {
        let v = judge(&series(|f| 0.004 * f), &Budgets::DEFAULT);
        assert_eq!(v.failures.len(), 1, "{v:?}");
        assert!(v.failures[0].starts_with("16×: 64.0 ms CPU"), "{v:?}");
    }

    #[test]
    fn memory_is_judged_against_its_floor_and_size() {
        let b = Budgets::DEFAULT;
        let small = Point {
            factor: 1,
            bytes: 100,
            response_bytes: 0,
            cpu: 0.0,
            mem: 10 << 20,
            cpu_resolution: 0.0,
        };
        assert!(judge(std::slice::from_ref(&small), &b).passed());
        let big = Point {
            mem: 17 << 20,
            ..small
        };
        assert!(!judge(&[big], &b).passed());
        let large_body = Point {
            factor: 1,
            bytes: 2 << 20,
            response_bytes: 0,
            cpu: 0.0,
            mem: 30 << 20,
            cpu_resolution: 0.0,
        };
        assert!(judge(&[large_body], &b).passed());
    }
}
