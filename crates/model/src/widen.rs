//! A node-head GGNN's weights carried into a wider state: the capacity
//! experiment of issue 30 starts a wide model where a trained narrow one
//! stands, instead of from a random start.
//!
//! The state is `[text (t entries); selector (2)]`, and the position gate
//! reads `s(k)`: `t/2` sines then `t/2` cosines at frequencies
//! `10000^(−2i/t)` (`programl_infer::config::sinusoid_into`). When the wide
//! text width is `r` times the narrow one, the narrow sine `i` has the same
//! frequency as the wide sine `r·i` (and so for cosines), so each narrow
//! channel `c` has a wide channel `m(c)` that carries the same quantity:
//!
//! ```text
//! m(c) = r·c                   sines        (c <  t/2)
//!      = r·t/2 + r·(c − t/2)   cosines      (t/2 ≤ c < t)
//!      = r·t + (c − t)         the selector (c ≥ t)
//! ```
//!
//! Every weight is copied through `m` on each of its state dimensions
//! (a block-stacked dimension, such as the six edge maps' rows or the GRU's
//! three gates, block by block). The other entries are the wide model's own
//! random initialisation scaled by `noise`. With `noise` 0 the extra channels
//! start at 0 and stay there (their GRU update keeps a zero state at zero), and
//! the wide model computes exactly what the narrow one does; it is also
//! stuck there, since a zero channel gets zero gradients. A small `noise`
//! breaks that symmetry while starting within a rounding of the narrow
//! model's predictions (tested in `tests/widen.rs`).

use crate::ggnn::{Ggnn, SELECTOR_DIM};
use tch::{Kind, Tensor};

/// How one dimension of a weight maps from the narrow model to the wide.
#[derive(Clone, Copy)]
enum Dim {
    /// Unchanged (classes, vocabulary rows, positions).
    Same,
    /// `blocks` blocks of the state width, each mapped by `m`.
    State(i64),
    /// The text embedding's width: `m` on its first `t` channels.
    Text,
}

/// The dimensions of each node-head parameter, by name.
fn dims(name: &str) -> Option<&'static [Dim]> {
    use Dim::*;
    Some(match name {
        "embedding.weight" => &[Same, Text],
        "messages.weight" => &[State(crate::ggnn::EDGE_TYPES), State(1)],
        "messages.bias" => &[State(crate::ggnn::EDGE_TYPES)],
        // Its input is s(k), laid out as the state is.
        "gate.weight" => &[State(1), State(1)],
        "gate.bias" => &[State(1)],
        "gru.weight_ih" | "gru.weight_hh" => &[State(3), State(1)],
        "gru.bias_ih" | "gru.bias_hh" => &[State(3)],
        // [h_T; h_0]
        "readout.gate.weight" => &[Same, State(2)],
        "readout.gate.bias" | "readout.transform.bias" => &[Same],
        "readout.transform.weight" => &[Same, State(1)],
        _ => return None,
    })
}

/// `m(c)` for every narrow channel `c`, narrow width `narrow`, wide `wide`.
fn channel_map(narrow: i64, wide: i64) -> Vec<i64> {
    let (t, tw) = (narrow - SELECTOR_DIM, wide - SELECTOR_DIM);
    let r = tw / t;
    (0..narrow)
        .map(|c| match c {
            c if c < t / 2 => r * c,
            c if c < t => r * (t / 2) + r * (c - t / 2),
            c => r * t + (c - t),
        })
        .collect()
}

/// Overwrites `wide`'s parameters with `narrow`'s, carried through the
/// channel map (module docs), and scales every other entry of `wide`
/// (its own initialisation) by `noise`. Both are node-head models of the
/// same vocabulary, classes, positions and aggregation; the wide text
/// width is a whole multiple of the narrow one.
pub fn widen(wide: &Ggnn, narrow: &Ggnn, noise: f64) -> Result<(), String> {
    let (hn, hw) = (narrow.width(), wide.width());
    let (t, tw) = (hn - SELECTOR_DIM, hw - SELECTOR_DIM);
    if hw < hn || tw % t != 0 {
        return Err(format!(
            "a state {hn} wide widens to {hn} + k·{t} entries (66, 98, ...), not {hw}: the position sinusoids line up only then"
        ));
    }
    let (a, b) = (narrow.hyper(), wide.hyper());
    if a.vocab_size != b.vocab_size || a.classes != b.classes || a.positions != b.positions || a.aggregation != b.aggregation {
        return Err("widening keeps the vocabulary, classes, positions and aggregation".into());
    }
    if !(noise.is_finite() && noise >= 0.0) {
        return Err(format!("noise {noise} is not a finite scale >= 0"));
    }
    let m = channel_map(hn, hw);
    let device = wide.device();
    let narrow_params = narrow.named_parameters();
    let wide_params = wide.named_parameters();
    if narrow_params.len() != wide_params.len() {
        return Err("widening carries node-head models only (no pooling or auxiliary inputs)".into());
    }
    tch::no_grad(|| {
        for ((name, from), (wide_name, to)) in narrow_params.into_iter().zip(wide_params) {
            assert_eq!(name, wide_name, "both models list their parameters in one order");
            let Some(dims) = dims(name) else {
                return Err(format!("widening carries node-head models only: '{name}'"));
            };
            // Each narrow index's wide index, per dimension.
            let index: Vec<Tensor> = dims
                .iter()
                .zip(from.size())
                .map(|(d, len)| {
                    let map: Vec<i64> = match *d {
                        Dim::Same => (0..len).collect(),
                        Dim::Text => m[..t as usize].to_vec(),
                        Dim::State(blocks) => (0..blocks).flat_map(|k| m.iter().map(move |&c| k * hw + c)).collect(),
                    };
                    assert_eq!(map.len() as i64, len, "'{name}': the narrow shape follows its hyper");
                    Tensor::from_slice(&map).to_device(device)
                })
                .collect();
            let mut to = to.shallow_clone();
            let _ = to.g_mul_scalar_(noise);
            let values = from.to_device(device).to_kind(Kind::Float);
            let _ = match index.as_slice() {
                [i] => to.index_put_(&[Some(i.shallow_clone())], &values, false),
                [i, j] => to.index_put_(&[Some(i.view([-1, 1])), Some(j.view([1, -1]))], &values, false),
                _ => unreachable!("parameters are vectors or matrices"),
            };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::channel_map;

    #[test]
    fn the_channel_map_keeps_frequencies_and_puts_the_selector_last() {
        // 34 → 66: sines 0..16 to the even sines, cosines to the even
        // cosines (from 32), the selector to 64, 65.
        let m = channel_map(34, 66);
        assert_eq!(&m[..3], &[0, 2, 4]);
        assert_eq!(&m[16..18], &[32, 34]);
        assert_eq!(&m[32..], &[64, 65]);
        // Against the sinusoids themselves, at a position where they differ.
        let mut narrow = vec![0f32; 34];
        let mut wide = vec![0f32; 66];
        programl_infer::config::sinusoid_into(7, &mut narrow);
        programl_infer::config::sinusoid_into(7, &mut wide);
        for (c, &w) in m.iter().enumerate() {
            assert!((narrow[c] - wide[w as usize]).abs() < 1e-6, "channel {c} -> {w}");
        }
        assert_eq!(channel_map(34, 34), (0..34).collect::<Vec<_>>());
    }
}
