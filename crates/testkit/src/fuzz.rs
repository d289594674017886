//! A small seeded mutation fuzzer for stable Rust: byte-level mutations of
//! real inputs (bit flips, interesting bytes and numbers, deletions,
//! duplications, truncations, dictionary tokens, splices), reproducible
//! from a seed, and a panic catcher that keeps the input that failed.
//!
//! The fuzz targets (`tests/fuzz_formats.rs`, `crates/dataset/tests/fuzz_shards.rs`,
//! the llvm-stress target in `crates/cli/tests/robustness.rs`) run
//! [`iterations`] inputs: a short run by default, `PROGRAML_FUZZ_ITERS=N`
//! for a long one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use programl::batch::SplitMix64;

/// Iterations of a fuzz target: `$PROGRAML_FUZZ_ITERS` if set, else
/// `default` (the short run of the test suite).
pub fn iterations(default: usize) -> usize {
    match std::env::var("PROGRAML_FUZZ_ITERS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("PROGRAML_FUZZ_ITERS={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The base seed of a fuzz run: `$PROGRAML_FUZZ_SEED` if set, else 0, so a
/// default run is the same on every machine and a long run can explore
/// elsewhere.
pub fn base_seed() -> u64 {
    std::env::var("PROGRAML_FUZZ_SEED").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Numbers that break parsers: zero, signs, the edges of the integer widths
/// and of `f64`.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "7",
    "127",
    "255",
    "65535",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1e308",
    "1e999",
    "0.5",
    "-0",
];

/// Bytes that break binary decoders: varint continuation, sign bits, ends
/// of ranges.
const BYTES: &[u8] = &[0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x0a, 0x22, 0x5c];

/// A reproducible mutator: each call to [`Mutator::mutate`] applies one to
/// four mutations, drawn from the seed, and says which.
pub struct Mutator {
    rng: SplitMix64,
    dictionary: Vec<Vec<u8>>,
}

impl Mutator {
    /// A mutator seeded with `seed`; `dictionary` holds tokens of the
    /// format under test (keys, keywords) that random bytes rarely hit.
    pub fn new(seed: u64, dictionary: &[&str]) -> Mutator {
        Mutator { rng: SplitMix64::new(seed), dictionary: dictionary.iter().map(|t| t.as_bytes().to_vec()).collect() }
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.below(n as u64) as usize
    }

    /// A copy of `input` with one to four mutations, and their description
    /// (for the failure report). `other` is a second input to splice from.
    pub fn mutate(&mut self, input: &[u8], other: &[u8]) -> (Vec<u8>, String) {
        let mut bytes = input.to_vec();
        let mut done = Vec::new();
        // Mostly one mutation, so that most mutants still parse and reach
        // the checks behind the parser.
        let rounds = [1, 1, 1, 1, 2, 2, 3, 4][self.below(8)];
        for _ in 0..rounds {
            done.push(self.mutate_once(&mut bytes, other));
        }
        (bytes, done.join(", "))
    }

    fn mutate_once(&mut self, b: &mut Vec<u8>, other: &[u8]) -> String {
        let len = b.len();
        if len == 0 {
            let token = self.token();
            b.extend_from_slice(&token);
            return format!("insert {:?} into empty input", String::from_utf8_lossy(&token));
        }
        match self.below(12) {
            0 => {
                let (i, bit) = (self.below(len), self.below(8));
                b[i] ^= 1 << bit;
                format!("flip bit {bit} of byte {i}")
            }
            1 => {
                let i = self.below(len);
                b[i] = BYTES[self.below(BYTES.len())];
                format!("byte {i} = {:#04x}", b[i])
            }
            2 => {
                let i = self.below(len);
                b[i] = self.rng.next_u64() as u8;
                format!("byte {i} = {:#04x}", b[i])
            }
            3 => {
                let at = self.below(len);
                let n = 1 + self.below((len - at).min(64));
                b.drain(at..at + n);
                format!("delete {n} bytes at {at}")
            }
            4 => {
                let at = self.below(len);
                let n = 1 + self.below((len - at).min(64));
                let chunk = b[at..at + n].to_vec();
                let to = self.below(len + 1);
                b.splice(to..to, chunk);
                format!("copy {n} bytes from {at} to {to}")
            }
            5 => {
                let at = self.below(len);
                b.truncate(at);
                format!("truncate to {at} bytes")
            }
            6 | 7 => self.replace_number(b),
            8 => {
                let token = self.token();
                let at = self.below(len + 1);
                b.splice(at..at, token.iter().copied());
                format!("insert {:?} at {at}", String::from_utf8_lossy(&token))
            }
            9 | 10 => self.mutate_lines(b),
            _ => {
                if other.is_empty() {
                    return self.mutate_once(b, other);
                }
                let at = self.below(len);
                let from = self.below(other.len());
                let n = 1 + self.below((other.len() - from).min(256));
                let end = (at + n).min(len);
                b.splice(at..end, other[from..from + n].iter().copied());
                format!("splice {n} bytes of the other input at {at}")
            }
        }
    }

    /// Deletes, duplicates or swaps whole lines: fields of the text
    /// formats, so the result often still parses.
    fn mutate_lines(&mut self, b: &mut Vec<u8>) -> String {
        let mut lines: Vec<Vec<u8>> = b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
        if lines.len() < 3 {
            return self.replace_number(b);
        }
        let (i, j) = (self.below(lines.len()), self.below(lines.len()));
        let what = match self.below(3) {
            0 => {
                lines.remove(i);
                format!("delete line {i}")
            }
            1 => {
                let line = lines[i].clone();
                lines.insert(j, line);
                format!("copy line {i} before line {j}")
            }
            _ => {
                lines.swap(i, j);
                format!("swap lines {i} and {j}")
            }
        };
        *b = lines.join(&b'\n');
        what
    }

    fn token(&mut self) -> Vec<u8> {
        if !self.dictionary.is_empty() && self.below(2) == 0 {
            let i = self.below(self.dictionary.len());
            self.dictionary[i].clone()
        } else {
            NUMBERS[self.below(NUMBERS.len())].as_bytes().to_vec()
        }
    }

    /// Replaces a run of ASCII digits (with its sign) by an interesting
    /// number: ids, positions, flows and lengths of text formats.
    fn replace_number(&mut self, b: &mut Vec<u8>) -> String {
        let len = b.len();
        let start = self.below(len);
        let Some(offset) = b[start..].iter().chain(b[..start].iter()).position(u8::is_ascii_digit) else {
            let i = self.below(len);
            b[i] = BYTES[self.below(BYTES.len())];
            return format!("byte {i} = {:#04x} (no digits)", b[i]);
        };
        let mut i = (start + offset) % len;
        while i > 0 && b[i - 1].is_ascii_digit() {
            i -= 1;
        }
        if i > 0 && b[i - 1] == b'-' {
            i -= 1;
        }
        let mut end = i + 1;
        while end < len && b[end].is_ascii_digit() {
            end += 1;
        }
        let number = NUMBERS[self.below(NUMBERS.len())];
        b.splice(i..end, number.bytes());
        format!("number at {i} = {number}")
    }
}

/// Runs `f`, turning a panic into `Err` with its message.
pub fn no_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string())
    })
}

/// Keeps a failing input as `dir/name` for reproduction; returns its path.
pub fn keep_failure(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(&path, bytes);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_reproducible_and_change_the_input() {
        let input = br#"{"nodes":[{"id":0,"type":0}],"links":[]}"#;
        let run = |seed| {
            let mut m = Mutator::new(seed, &["\"source\":"]);
            (0..200).map(|_| m.mutate(input, b"other input").0).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let changed = run(3).iter().filter(|m| m.as_slice() != input).count();
        assert!(changed > 190, "{changed} of 200 mutants differ from the input");
    }

    #[test]
    fn numbers_are_replaced_whole() {
        let mut m = Mutator::new(1, &[]);
        for _ in 0..100 {
            let mut b = b"a -12 b".to_vec();
            let what = m.replace_number(&mut b);
            let s = String::from_utf8(b).unwrap();
            assert!(NUMBERS.iter().any(|n| s == format!("a {n} b")), "{what}: {s}");
        }
    }

    #[test]
    fn panics_become_errors() {
        assert_eq!(no_panic(|| 3), Ok(3));
        let e = no_panic(|| -> u8 { panic!("boom {}", 1) }).unwrap_err();
        assert_eq!(e, "boom 1");
    }
}
