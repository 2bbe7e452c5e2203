//! The statistics every figure is made with: one percentile, and a median with its spread over rounds.

/// A median with the least and most of the rounds (or runs) it comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub const fn new(median: f64, min: f64, max: f64) -> Spread {
        Spread { median, min, max }
    }

    /// Whether two spreads share a value: then neither figure is told apart from the other.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// The median, least and most of `values` (none: all zero).
pub fn spread(values: &[f64]) -> Spread {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => Spread::default(),
        // The middle sample, or the mean of the middle two: one and the same when n is odd.
        n => Spread::new(
            (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0,
            sorted[0],
            sorted[n - 1],
        ),
    }
}

/// The `p`th percentile (0 to 100) of `sorted`, ascending: the sample nearest to rank
/// `p/100 * (n - 1)`; NaN for no samples, which every table shows as "-".
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_sample_and_spreads_the_middle_one() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        assert_eq!(percentile(&sorted, 50.0), 3.0);
        assert_eq!(percentile(&sorted, 90.0), 5.0);
        assert_eq!(percentile(&sorted, 100.0), 5.0);
        assert!(percentile(&[], 50.0).is_nan());
        let s = spread(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert_eq!(spread(&[]), Spread::default());
        assert!(s.overlaps(&spread(&[3.9, 9.0])));
        assert!(!s.overlaps(&spread(&[4.1, 9.0])));
    }
}
