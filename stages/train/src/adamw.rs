//! AdamW with decoupled weight decay, per-parameter decay groups and global-norm clipping,
//! exactly as `torch.optim.AdamW` plus `clip_grad_norm_` (spec D.1 step 5, D.2).
//!
//! One update, for each parameter `p` with gradient `g` (after clipping), at its step `t`
//! (1-based):
//!
//! ```text
//! p ← p · (1 − lr · wd)                 (wd = 0 for the no-decay group)
//! m ← m + (g − m)(1 − β1)               (torch's lerp)
//! v ← β2 v + (1 − β2) g²
//! p ← p − lr / (1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + ε)
//! ```
//!
//! Each parameter's update is one operation, [`cwm_models::adamw_update`] (one pass over its
//! memory on the CPU, one kernel on a GPU), with the same `f32` arithmetic as written above;
//! [`AdamWConfig::update`] can ask for separate tensor operations instead.
//!
//! Clipping: the global L2 norm `N` over all gradients; every gradient is scaled by
//! `min(1, clip / (N + 1e−6))`. A non-finite `N`, or a non-finite loss, skips the update (no
//! state changes).
//!
//! A step is queued on the device whole, with one read-back at its end: the norm, the
//! clipping factor and the decision to skip are computed there in `f32`, as torch computes
//! them, and each parameter's update leaves everything as it was when the factor is NaN (a
//! skip). The read-back returns the loss, the norm, whether the update happened and whether
//! every parameter is still finite (spec D.1 steps 5 and 7), so the device is never left
//! waiting for the host in the middle of a step.
//!
//! State is keyed by each parameter's module path (`Gdn.backbone.layers.0.attn.a_log`), so it
//! survives rebuilding the model from a checkpoint, and is saved and restored exactly
//! ([`AdamW::export`], [`AdamW::import`]).

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use cwm_models::{AdamWScalars, AdamWUpdate, sum_all};

use crate::TrainError;

/// Hyper-parameters of [`AdamW`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWConfig {
    /// β1 (the reference: 0.9).
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε (torch's default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay of the decayed group.
    pub weight_decay: f64,
    /// Global gradient-norm bound; `0` disables clipping (the norm is still reported).
    pub grad_clip: f64,
    /// Last path components of the parameters that get no weight decay (for `gdn`/`gdn_pos`:
    /// `a_log` and `dt_bias`; empty for the other families).
    pub no_decay: Vec<String>,
    /// How each parameter is updated (the same arithmetic either way).
    pub update: AdamWUpdate,
}

impl AdamWConfig {
    /// The reference's settings for a given β2, decay and clip, with no exemptions.
    pub fn new(beta2: f64, weight_decay: f64, grad_clip: f64) -> AdamWConfig {
        AdamWConfig {
            beta1: 0.9,
            beta2,
            eps: 1e-8,
            weight_decay,
            grad_clip,
            no_decay: Vec::new(),
            update: AdamWUpdate::OnePass,
        }
    }

    /// Whether the parameter at `path` is in the decayed group.
    pub fn decays(&self, path: &str) -> bool {
        let leaf = path.rsplit('.').next().unwrap_or(path);
        !self.no_decay.iter().any(|name| name == leaf)
    }
}

/// The moments of one parameter, flattened, on the model's inner (non-autodiff) device.
#[derive(Debug, Clone)]
struct Moments {
    step: u64,
    m: Tensor<1>,
    v: Tensor<1>,
}

/// The exported state of one parameter: path, step count, first and second moments.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedMoments {
    /// The parameter's module path.
    pub path: String,
    /// Updates applied to it so far.
    pub step: u64,
    /// First moment, flattened.
    pub m: Vec<f32>,
    /// Second moment, flattened.
    pub v: Vec<f32>,
}

/// What one call of [`AdamW::step`] did, as read back from the device at its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutcome {
    /// The loss of the step's batch.
    pub loss: f64,
    /// The global gradient norm before clipping (in `f32`, as torch's `clip_grad_norm_`).
    pub grad_norm: f64,
    /// False when the loss or the norm was not finite and nothing was updated.
    pub applied: bool,
    /// Whether every float parameter is finite after the step.
    pub params_finite: bool,
}

/// The optimizer.
#[derive(Debug, Clone)]
pub struct AdamW {
    config: AdamWConfig,
    states: BTreeMap<String, Moments>,
}

fn read_f32(tensor: Tensor<1>) -> Result<Vec<f32>, TrainError> {
    tensor
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| TrainError::Failed(format!("cannot read a tensor back: {e:?}")))
}

/// The sum of `[1]` parts; `None` for no parts. One concatenation and one reduction: on
/// cubecl's backends the concatenation costs no kernel launch of its own, where fusion ran a
/// chain of additions, one per part, as a kernel per addition (`cube-cpu`, docs/gpu-speed.md).
fn total(parts: Vec<Tensor<1>>) -> Option<Tensor<1>> {
    (!parts.is_empty()).then(|| sum_all(Tensor::cat(parts, 0)))
}

/// Sums, in module order, the squares of every float parameter's gradient.
struct NormVisitor<'a> {
    grads: &'a GradientsParams,
    squares: Vec<Tensor<1>>,
}

impl ModuleVisitor for NormVisitor<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            self.squares.push(sum_all(grad.square()));
        }
    }
}

/// The global L2 norm of `grads` over the parameters of `model` (`[1]`, on the device; `None`
/// when no parameter has a gradient).
fn global_norm<M: Module>(model: &M, grads: &GradientsParams) -> Option<Tensor<1>> {
    let mut visitor = NormVisitor {
        grads,
        squares: Vec::new(),
    };
    model.visit(&mut visitor);
    total(visitor.squares).map(Tensor::sqrt)
}

/// Sums, over every float parameter without a gradient in `grads`, `x − x`: 0 when every
/// element is finite, NaN when one is NaN or infinite (and never an overflow, unlike a plain
/// sum). The parameters with one are checked by their updates.
struct FiniteVisitor<'a> {
    grads: &'a GradientsParams,
    sums: Vec<Tensor<1>>,
}

impl ModuleVisitor for FiniteVisitor<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.grads.get::<D>(param.id).is_some() {
            return;
        }
        let x = param.val().inner();
        let n = x.shape().num_elements();
        let x = x.reshape([n]);
        self.sums.push(sum_all(x.clone() - x));
    }
}

/// `[1]` on the device: 0 when every float parameter of `model` that has no gradient in
/// `grads` is finite, NaN otherwise; `None` when every parameter has one (the usual case).
fn finiteness_without_gradient<M: Module>(model: &M, grads: &GradientsParams) -> Option<Tensor<1>> {
    let mut visitor = FiniteVisitor {
        grads,
        sums: Vec::new(),
    };
    model.visit(&mut visitor);
    total(visitor.sums)
}

/// `[1]` on the device: 0 when `x` (`[1]`) is finite, NaN when not (`∞ − ∞` is NaN).
fn nan_unless_finite(x: &Tensor<1>) -> Tensor<1> {
    x.clone() - x.clone()
}

struct UpdateMapper<'a> {
    path: Vec<String>,
    grads: &'a GradientsParams,
    config: &'a AdamWConfig,
    states: &'a mut BTreeMap<String, Moments>,
    lr: f64,
    coef: Tensor<1>,
    /// `[1]`, 0 while every parameter updated so far is finite, NaN once one is not: passed
    /// from update to update (taken and put back, so that each update may write it in place).
    finite: Option<Tensor<1>>,
    /// The paths whose step count this update advanced.
    touched: Vec<String>,
}

impl ModuleMapper for UpdateMapper<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_owned());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(grad) = self.grads.get::<D>(param.id) else {
            return param;
        };
        let path = self.path.join(".");
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let dims = tensor.dims();
        let n = tensor.shape().num_elements();
        let c = self.config;
        let grad = grad.reshape([n]);
        let p = tensor.inner().reshape([n]);
        // torch multiplies by (1 − lr·wd) unconditionally; with wd = 0 that is × 1.0.
        let wd = if c.decays(&path) { c.weight_decay } else { 0.0 };
        let previous = self.states.remove(&path);
        let (step, m, v) = match previous {
            Some(Moments { step, m, v }) => (step + 1, m, v),
            None => (1, grad.zeros_like(), grad.zeros_like()),
        };
        let betas = (c.beta1, c.beta2);
        let scalars = AdamWScalars::at_step(step, self.lr, wd, betas, c.eps);
        // Always there: every update puts it back.
        let finite = self.finite.take().unwrap_or_else(|| self.coef.zeros_like());
        let updated = c
            .update
            .apply([p, grad, m, v], self.coef.clone(), finite, scalars);
        self.finite = Some(updated.finite);
        let (m, v) = (updated.m, updated.v);
        self.touched.push(path.clone());
        self.states.insert(path, Moments { step, m, v });
        let mut value = Tensor::from_inner(updated.param.reshape(dims));
        if require_grad {
            value = value.require_grad();
        }
        Param::from_mapped_value(id, value, mapper)
    }
}

impl AdamW {
    /// A fresh optimizer (no moments yet).
    pub fn new(config: AdamWConfig) -> AdamW {
        AdamW {
            config,
            states: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// One step: clips `grads` by their global norm and applies one update with learning rate
    /// `lr`, unless `loss` (the batch's, `[1]`) or the norm is not finite; then reads back, at
    /// once, what [`StepOutcome`] holds. Parameters without a gradient are left alone (their
    /// step count does not advance).
    ///
    /// # Errors
    /// [`TrainError::Failed`] when a value cannot be read back from the device.
    pub fn step<M: Module>(
        &mut self,
        model: M,
        loss: Tensor<1>,
        grads: &GradientsParams,
        lr: f64,
    ) -> Result<(M, StepOutcome), TrainError> {
        let loss = loss.inner();
        let zero = || loss.zeros_like();
        let norm = global_norm(&model, grads).unwrap_or_else(zero);
        let coef = self.clip_factor(&norm) + nan_unless_finite(&loss) + nan_unless_finite(&norm);
        let mut mapper = UpdateMapper {
            path: Vec::new(),
            grads,
            config: &self.config,
            states: &mut self.states,
            lr,
            coef: coef.clone(),
            finite: Some(zero()),
            touched: Vec::new(),
        };
        let model = model.map(&mut mapper);
        let touched = mapper.touched;
        let updated = mapper.finite.unwrap_or_else(zero);
        let finite = match finiteness_without_gradient(&model, grads) {
            Some(rest) => updated + rest,
            None => updated,
        };
        let values = read_f32(Tensor::cat(vec![loss, norm, coef, finite], 0))?;
        let &[loss, grad_norm, coef, finite] = values.as_slice() else {
            return Err(TrainError::Failed(format!(
                "a step read back {} values, not 4",
                values.len()
            )));
        };
        let applied = !coef.is_nan();
        if !applied {
            self.undo_steps(&touched);
        }
        let outcome = StepOutcome {
            loss: f64::from(loss),
            grad_norm: f64::from(grad_norm),
            applied,
            params_finite: finite == 0.0,
        };
        Ok((model, outcome))
    }

    /// The clipping factor from the global norm, on the device, as torch computes it:
    /// `min(1, clip / (norm + 1e−6))` in `f32`, or 1 without clipping.
    fn clip_factor(&self, norm: &Tensor<1>) -> Tensor<1> {
        let clip = self.config.grad_clip;
        let one = norm.ones_like();
        if clip > 0.0 {
            (one.mul_scalar(clip) / norm.clone().add_scalar(1e-6)).clamp_max(1.0)
        } else {
            one
        }
    }

    /// Takes back the step counts a skipped update advanced; moments it created (still zero)
    /// go with them.
    fn undo_steps(&mut self, paths: &[String]) {
        for path in paths {
            if let Some(state) = self.states.get_mut(path) {
                state.step -= 1;
                if state.step == 0 {
                    self.states.remove(path);
                }
            }
        }
    }

    /// Every parameter's moments, in path order, read back to the host exactly.
    ///
    /// # Errors
    /// [`TrainError::Failed`] when a tensor cannot be read back.
    pub fn export(&self) -> Result<Vec<ExportedMoments>, TrainError> {
        self.states
            .iter()
            .map(|(path, s)| {
                Ok(ExportedMoments {
                    path: path.clone(),
                    step: s.step,
                    m: read_f32(s.m.clone())?,
                    v: read_f32(s.v.clone())?,
                })
            })
            .collect()
    }

    /// Replaces the moments by `moments` (from [`AdamW::export`]), placed on `device` (the
    /// model's device; moments live on its non-autodiff side).
    ///
    /// # Errors
    /// [`TrainError::Failed`] when `m` and `v` of a parameter differ in length.
    pub fn import(
        &mut self,
        moments: Vec<ExportedMoments>,
        device: &Device,
    ) -> Result<(), TrainError> {
        let device = device.clone().inner();
        let mut states = BTreeMap::new();
        for e in moments {
            if e.m.len() != e.v.len() {
                return Err(TrainError::Failed(format!(
                    "optimizer state of {}: {} first and {} second moments",
                    e.path,
                    e.m.len(),
                    e.v.len()
                )));
            }
            let n = e.m.len();
            let m = Tensor::<1>::from_data(TensorData::new(e.m, [n]), &device);
            let v = Tensor::<1>::from_data(TensorData::new(e.v, [n]), &device);
            states.insert(e.path, Moments { step: e.step, m, v });
        }
        self.states = states;
        Ok(())
    }
}

/// The module path of every float parameter of `model`, in module order.
pub fn param_paths<M: Module>(model: &M) -> Vec<String> {
    struct Paths {
        path: Vec<String>,
        out: Vec<String>,
    }
    impl ModuleVisitor for Paths {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_owned());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
            self.out.push(self.path.join("."));
        }
    }
    let mut paths = Paths {
        path: Vec::new(),
        out: Vec::new(),
    };
    model.visit(&mut paths);
    paths.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Module, Debug)]
    struct Tiny {
        w: Param<Tensor<2>>,
        a_log: Param<Tensor<1>>,
    }

    fn tiny(device: &Device) -> Tiny {
        Tiny {
            w: Param::from_tensor(
                Tensor::<2>::from_data(
                    TensorData::new(vec![0.5f32, -1.0, 2.0, 0.25], [2, 2]),
                    device,
                )
                .require_grad(),
            ),
            a_log: Param::from_tensor(
                Tensor::<1>::from_data(TensorData::new(vec![1.5f32, -0.75], [2]), device)
                    .require_grad(),
            ),
        }
    }

    /// Loss = Σ c_i · p_i² over all entries, so dL/dp = 2 c p: the loss, detached, and the
    /// gradients.
    fn grads_of(model: &Tiny, scale: f32) -> (Tensor<1>, GradientsParams) {
        let device = model.w.val().device();
        let cw = Tensor::<2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, -0.5, 3.0], [2, 2]),
            &device,
        );
        let ca = Tensor::<1>::from_data(TensorData::new(vec![0.5f32, 4.0], [2]), &device);
        let loss = (model.w.val().square() * cw).sum() + (model.a_log.val().square() * ca).sum();
        let loss = loss.mul_scalar(scale);
        let detached = loss.clone().detach();
        (
            detached,
            GradientsParams::from_grads(loss.backward(), model),
        )
    }

    fn values(model: &Tiny) -> Vec<f64> {
        let mut out: Vec<f64> = Vec::new();
        for t in [
            model.w.val().inner().reshape([4]),
            model.a_log.val().inner().reshape([2]),
        ] {
            out.extend(read_f32(t).unwrap().into_iter().map(f64::from));
        }
        out
    }

    /// Straight from torch's AdamW and clip_grad_norm_, in f64.
    fn reference(
        steps: usize,
        scale: f64,
        lr: &[f64],
        config: &AdamWConfig,
    ) -> (Vec<f64>, Vec<f64>) {
        let c = [1.0, 2.0, -0.5, 3.0, 0.5, 4.0];
        let decays = [true, true, true, true, false, false];
        let mut p = vec![0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75];
        let (mut m, mut v) = (vec![0.0; 6], vec![0.0; 6]);
        let mut norms = Vec::new();
        for t in 1..=steps {
            let g: Vec<f64> = (0..6).map(|i| 2.0 * c[i] * p[i] * scale).collect();
            let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
            norms.push(norm);
            let coef = (config.grad_clip / (norm + 1e-6)).min(1.0);
            let lr = lr[t - 1];
            for i in 0..6 {
                let g = g[i] * coef;
                let wd = if decays[i] { config.weight_decay } else { 0.0 };
                p[i] *= 1.0 - lr * wd;
                m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * g;
                v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * g * g;
                let mhat = m[i] / (1.0 - config.beta1.powi(t as i32));
                let vhat = v[i] / (1.0 - config.beta2.powi(t as i32));
                p[i] -= lr * mhat / (vhat.sqrt() + config.eps);
            }
        }
        (p, norms)
    }

    fn run(scale: f32, clip: f64) {
        let device = Device::flex().autodiff();
        let mut config = AdamWConfig::new(0.95, 0.1, clip);
        config.no_decay = vec!["a_log".into()];
        let lrs = [1e-2, 5e-3, 2e-2];
        let mut optim = AdamW::new(config.clone());
        let mut model = tiny(&device);
        let mut norms = Vec::new();
        for &lr in &lrs {
            let (loss, grads) = grads_of(&model, scale);
            let (next, outcome) = optim.step(model, loss, &grads, lr).unwrap();
            assert!(outcome.applied && outcome.params_finite && outcome.loss > 0.0);
            norms.push(outcome.grad_norm);
            model = next;
        }
        let (expected, expected_norms) = reference(lrs.len(), scale as f64, &lrs, &config);
        for (got, want) in values(&model).iter().zip(&expected) {
            assert!(
                (got - want).abs() < 2e-6 * want.abs().max(1.0),
                "{got} vs {want}"
            );
        }
        for (got, want) in norms.iter().zip(&expected_norms) {
            assert!(
                (got - want).abs() < 1e-5 * want.max(1.0),
                "norm {got} vs {want}"
            );
        }
        // The a_log entries are not decayed: decaying them as well changes them, and leaves the
        // decayed group as it was.
        let mut decayed = config.clone();
        decayed.no_decay.clear();
        let mut optim = AdamW::new(decayed);
        let mut model = tiny(&device);
        for &lr in &lrs {
            let (loss, grads) = grads_of(&model, scale);
            model = optim.step(model, loss, &grads, lr).unwrap().0;
        }
        let got = values(&model);
        assert!(
            (got[4] - expected[4]).abs() > 1e-5,
            "decaying a_log must change it: {} vs {}",
            got[4],
            expected[4]
        );
        assert!(
            (got[0] - expected[0]).abs() < 2e-6,
            "w is decayed either way"
        );
    }

    #[test]
    fn update_matches_an_f64_hand_computation_without_clipping() {
        // Gradient norm is about 20 < 100: no clipping.
        run(1.0, 100.0);
    }

    #[test]
    fn update_matches_an_f64_hand_computation_with_clipping() {
        // Scaled gradients have norm ≫ 1: clipped to norm 1 every step.
        run(50.0, 1.0);
    }

    #[test]
    fn non_finite_gradient_norm_skips_the_update() {
        let device = Device::flex().autodiff();
        let mut optim = AdamW::new(AdamWConfig::new(0.999, 0.0, 1.0));
        let model = tiny(&device);
        let before = values(&model);
        let (loss, grads) = grads_of(&model, f32::INFINITY);
        let (model, outcome) = optim.step(model, loss, &grads, 1e-3).unwrap();
        assert!(!outcome.applied);
        assert!(!outcome.grad_norm.is_finite());
        assert_eq!(values(&model), before);
        assert!(
            optim.export().unwrap().is_empty(),
            "no moments were created"
        );
    }

    /// An optimizer and the model after two good steps.
    fn two_steps(device: &Device) -> (AdamW, Tiny) {
        let mut optim = AdamW::new(AdamWConfig::new(0.99, 0.01, 1.0));
        let mut model = tiny(device);
        for _ in 0..2 {
            let (loss, grads) = grads_of(&model, 1.0);
            model = optim.step(model, loss, &grads, 1e-2).unwrap().0;
        }
        (optim, model)
    }

    #[test]
    fn a_non_finite_loss_or_norm_alone_skips_the_update_and_keeps_the_state() {
        let device = Device::flex().autodiff();
        let (mut optim, mut model) = two_steps(&device);
        let (before, state) = (values(&model), optim.export().unwrap());
        let scalar = |x: f32| Tensor::<1>::from_data(TensorData::new(vec![x], [1]), &device);
        // A NaN loss with finite gradients; a finite loss with infinite gradients.
        let cases = [(f32::NAN, 1.0), (0.5, f32::INFINITY)];
        for (loss, scale) in cases {
            let grads = grads_of(&model, scale).1;
            let (next, outcome) = optim.step(model, scalar(loss), &grads, 1e-2).unwrap();
            model = next;
            assert!(
                !outcome.applied,
                "loss {loss}, gradients × {scale}: {outcome:?}"
            );
            assert_eq!(values(&model), before, "loss {loss}, gradients × {scale}");
            assert_eq!(
                optim.export().unwrap(),
                state,
                "loss {loss}, gradients × {scale}"
            );
        }
        // And the next finite step is the third.
        let (loss, grads) = grads_of(&model, 1.0);
        let outcome = optim.step(model, loss, &grads, 1e-2).unwrap().1;
        assert!(outcome.applied && outcome.params_finite, "{outcome:?}");
        assert!(optim.export().unwrap().iter().all(|e| e.step == 3));
    }

    #[test]
    fn an_update_that_overflows_a_parameter_is_reported_as_not_finite() {
        let device = Device::flex().autodiff();
        for update in AdamWUpdate::ALL {
            let mut config = AdamWConfig::new(0.99, 0.0, 0.0);
            config.update = update;
            let mut optim = AdamW::new(config);
            let model = tiny(&device);
            let (loss, grads) = grads_of(&model, 1.0);
            // lr / (1 − β1) overflows f32: the step is infinite.
            let outcome = optim.step(model, loss, &grads, 1e39).unwrap().1;
            assert!(
                outcome.applied && !outcome.params_finite,
                "{update}: {outcome:?}"
            );
        }
    }

    #[test]
    fn a_parameter_without_a_gradient_is_still_checked_for_finiteness() {
        let device = Device::flex().autodiff();
        for (a_log, finite) in [(1.5f32, true), (f32::INFINITY, false), (f32::NAN, false)] {
            let mut model = tiny(&device);
            model.a_log = Param::from_tensor(
                Tensor::<1>::from_data(TensorData::new(vec![a_log, -0.75], [2]), &device)
                    .require_grad(),
            );
            // A loss of `w` alone: `a_log` gets no gradient, so no update checks it.
            let loss = model.w.val().square().sum();
            let grads = GradientsParams::from_grads(loss.clone().backward(), &model);
            let mut optim = AdamW::new(AdamWConfig::new(0.99, 0.0, 0.0));
            let outcome = optim.step(model, loss.detach(), &grads, 1e-2).unwrap().1;
            assert!(outcome.applied, "a_log {a_log}: {outcome:?}");
            assert_eq!(outcome.params_finite, finite, "a_log {a_log}: {outcome:?}");
        }
    }

    #[test]
    fn state_round_trips_exactly() {
        let device = Device::flex().autodiff();
        let (optim, model) = two_steps(&device);
        let exported = optim.export().unwrap();
        assert_eq!(
            exported.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
            ["a_log", "w"]
        );
        assert!(exported.iter().all(|e| e.step == 2));
        let mut restored = AdamW::new(optim.config().clone());
        restored.import(exported.clone(), &device).unwrap();
        assert_eq!(restored.export().unwrap(), exported);
        assert_eq!(param_paths(&model), ["w", "a_log"]);
    }
}
