//! Precision, recall and F1 of the positive class, pooled over labelled
//! nodes: the one way `programl-train eval` and the learned pass's `verify`
//! mode count, so that their figures agree.

/// Counts of one confusion matrix (positive class).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    }
}
