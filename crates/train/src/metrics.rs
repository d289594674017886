//! Precision, recall and F1 of the positive class, pooled over labelled
//! nodes.

use serde::Serialize;

/// Counts of one confusion matrix (positive class).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Confusion {
    pub tp: u64,
    pub fp: u64,
    pub fn_: u64,
    pub tn: u64,
}

impl Confusion {
    pub fn add(&mut self, other: &Confusion) {
        self.tp += other.tp;
        self.fp += other.fp;
        self.fn_ += other.fn_;
        self.tn += other.tn;
    }

    pub fn record(&mut self, predicted: bool, actual: bool) {
        match (predicted, actual) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, true) => self.fn_ += 1,
            (false, false) => self.tn += 1,
        }
    }

    /// TP / (TP + FP); 1 when nothing was predicted positive and nothing is.
    pub fn precision(&self) -> f64 {
        ratio(self.tp, self.tp + self.fp, self.fn_ == 0)
    }

    /// TP / (TP + FN); 1 when there is no positive.
    pub fn recall(&self) -> f64 {
        ratio(self.tp, self.tp + self.fn_, true)
    }

    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }

    pub fn labelled(&self) -> u64 {
        self.tp + self.fp + self.fn_ + self.tn
    }
}

fn ratio(a: u64, b: u64, empty_is_perfect: bool) -> f64 {
    if b == 0 {
        if empty_is_perfect {
            1.0
        } else {
            0.0
        }
    } else {
        a as f64 / b as f64
    }
}

/// The step-count buckets of the breakdown: DDF-30, then 31–60, 61–200 and
/// above 200 (disjoint, unlike the cumulative subsets).
pub const BUCKETS: [(&str, u32, u32); 4] = [("1-30", 0, 30), ("31-60", 31, 60), ("61-200", 61, 200), (">200", 201, u32::MAX)];

pub fn bucket_of(steps: u32) -> usize {
    BUCKETS.iter().position(|&(_, lo, hi)| (lo..=hi).contains(&steps)).unwrap_or(BUCKETS.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f1_of_known_counts() {
        let c = Confusion { tp: 8, fp: 2, fn_: 8, tn: 100 };
        assert!((c.precision() - 0.8).abs() < 1e-12);
        assert!((c.recall() - 0.5).abs() < 1e-12);
        assert!((c.f1() - 2.0 * 0.8 * 0.5 / 1.3).abs() < 1e-12);
        let none = Confusion { tp: 0, fp: 0, fn_: 5, tn: 5 };
        assert_eq!(none.f1(), 0.0, "always negative scores 0 when positives exist");
        assert_eq!(bucket_of(30), 0);
        assert_eq!(bucket_of(31), 1);
        assert_eq!(bucket_of(201), 3);
    }
}
