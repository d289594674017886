//! The step-count breakdown of an evaluation; the counts themselves are the
//! core's [`Confusion`].

pub use programl::metrics::Confusion;

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
    fn buckets_are_disjoint() {
        assert_eq!(bucket_of(30), 0);
        assert_eq!(bucket_of(31), 1);
        assert_eq!(bucket_of(201), 3);
    }
}
