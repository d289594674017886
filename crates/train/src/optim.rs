//! AdamW with its state in tensors the checkpoint can save, so that a
//! resumed run continues bit for bit (tch's optimisers keep their moments
//! inside libtorch, out of reach of a checkpoint).
//!
//! The update is PyTorch's `torch.optim.AdamW` (decoupled weight decay, bias
//! correction), with its defaults: β = (0.9, 0.999), ε = 1e-8, weight decay
//! 0.01.

use tch::{Kind, Tensor};

pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Updates made so far.
    pub step: i64,
    /// First and second moments, one pair per parameter, in parameter order.
    pub moments: Vec<(Tensor, Tensor)>,
}

impl AdamW {
    pub fn new(parameters: &[&Tensor], lr: f64) -> AdamW {
        let moments = parameters.iter().map(|p| (p.zeros_like().detach(), p.zeros_like().detach())).collect();
        AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, step: 0, moments }
    }

    /// Clears the gradients (parameter gradients are small: 87k floats).
    pub fn zero_grad(parameters: &[&Tensor]) {
        for p in parameters {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.detach_().zero_();
            }
        }
    }

    /// One update from the parameters' own gradients (`p.grad()`, as
    /// autograd leaves them); parameters without one are left alone.
    pub fn step(&mut self, parameters: &[&Tensor]) {
        let grads: Vec<Tensor> = parameters.iter().map(|p| p.grad()).collect();
        self.step_with(parameters, &grads);
    }

    /// One update from `grads`, one per parameter in the same order (an
    /// undefined tensor skips its parameter).
    pub fn step_with(&mut self, parameters: &[&Tensor], grads: &[Tensor]) {
        assert_eq!(parameters.len(), grads.len(), "one gradient per parameter");
        self.step += 1;
        let t = self.step as f64;
        let bias1 = 1.0 - self.beta1.powf(t);
        let bias2 = 1.0 - self.beta2.powf(t);
        tch::no_grad(|| {
            for ((p, g), (m, v)) in parameters.iter().zip(grads).zip(self.moments.iter_mut()) {
                if !g.defined() {
                    continue;
                }
                let mut p = p.shallow_clone();
                let _ = p.g_mul_scalar_(1.0 - self.lr * self.weight_decay);
                let _ = m.g_mul_scalar_(self.beta1);
                let _ = m.g_add_(&(g * (1.0 - self.beta1)));
                let _ = v.g_mul_scalar_(self.beta2);
                let _ = v.g_add_(&(g * g * (1.0 - self.beta2)));
                let denom = v.sqrt() / bias2.sqrt() + self.eps;
                let _ = p.g_add_(&(&*m / denom * (-self.lr / bias1)));
            }
        });
    }

    /// The moments as named tensors (`m.<name>`, `v.<name>`).
    pub fn named_state(&self, names: &[&str]) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (name, (m, v)) in names.iter().zip(&self.moments) {
            out.push((format!("m.{name}"), m.shallow_clone()));
            out.push((format!("v.{name}"), v.shallow_clone()));
        }
        out
    }

    /// Restores moments saved by [`AdamW::named_state`]; checks names and
    /// shapes.
    pub fn restore(&mut self, names: &[&str], saved: Vec<(String, Tensor)>, step: i64) -> Result<(), String> {
        let mut saved: std::collections::HashMap<String, Tensor> = saved.into_iter().collect();
        for (name, (m, v)) in names.iter().zip(self.moments.iter_mut()) {
            for (prefix, slot) in [("m", m), ("v", v)] {
                let key = format!("{prefix}.{name}");
                let t = saved.remove(&key).ok_or_else(|| format!("optimiser state lacks '{key}'"))?;
                if t.size() != slot.size() || t.kind() != Kind::Float {
                    return Err(format!(
                        "optimiser state '{key}' has shape {:?} {:?}, expected {:?} Float",
                        t.size(),
                        t.kind(),
                        slot.size()
                    ));
                }
                tch::no_grad(|| slot.copy_(&t));
            }
        }
        self.step = step;
        Ok(())
    }
}
