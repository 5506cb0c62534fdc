//! The one lock on the backend's random generator.
//!
//! burn's backends keep one random generator per process: `Device::seed` reseeds it and every
//! random draw (a parameter's initial value, a dropout mask) takes the next numbers from it,
//! whichever thread draws. A training run reseeds it before each step so that the step's
//! masks depend on the step only. That holds only if no other thread draws between the seed
//! and the step's last draw, and the pipeline runs stages side by side in one process (an
//! evaluation building a model while a training steps). So every draw this crate makes
//! happens under [`rng_lock`]:
//!
//! - [`Model::init`](crate::Model::init) and [`Model::init_seeded`](crate::Model::init_seeded)
//!   hold it while they draw every initial value;
//! - the checkpoint and safetensors loaders and [`params_of`](crate::params_of) hold it while
//!   they build a model;
//! - [`dropout`](crate::dropout::dropout) holds it while it draws a mask.
//!
//! A caller that seeds and then runs a forward pass in training mode holds [`rng_lock`] from
//! the seed to the end of the forward pass, as the train stage does; the lock is reentrant on
//! one thread, so the draws inside take it again freely.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

static RNG_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds [`RNG_LOCK`] (through its outermost [`RngGuard`]).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// Exclusive use of the backend's random generator by this thread while it is held (see the
/// module docs). Only the outermost guard of a thread holds the lock; inner ones are free.
#[must_use = "the generator is shared again as soon as the guard is dropped"]
pub struct RngGuard {
    outer: Option<MutexGuard<'static, ()>>,
}

/// Takes the lock on the backend's random generator, or nothing when this thread holds it
/// already. A panic while it was held does not poison it: whoever needs the generator's
/// state exact reseeds it.
pub fn rng_lock() -> RngGuard {
    if HELD.with(Cell::get) {
        return RngGuard { outer: None };
    }
    let guard = RNG_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD.with(|held| held.set(true));
    RngGuard { outer: Some(guard) }
}

impl Drop for RngGuard {
    fn drop(&mut self) {
        if self.outer.is_some() {
            HELD.with(|held| held.set(false));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use burn::prelude::*;

    use super::*;
    use crate::{Family, Model, ModelConfig, Size, StateModel, params_of};

    /// Every parameter's bits, in module order.
    fn weight_bits(model: &Model) -> Vec<(String, Vec<u32>)> {
        crate::interop::torch_state_dict(model)
            .unwrap()
            .into_iter()
            .map(|t| (t.key, t.values.iter().map(|v| v.to_bits()).collect()))
            .collect()
    }

    /// Sets the flag when dropped, however the scope it lives in ends.
    struct SetOnDrop<'a>(&'a AtomicBool);

    impl Drop for SetOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_lock_is_reentrant_on_one_thread_and_exclusive_across_threads() {
        let outer = rng_lock();
        let inner = rng_lock();
        assert!(outer.outer.is_some() && inner.outer.is_none());
        drop(inner);
        assert!(HELD.with(Cell::get), "the outer guard still holds it");
        let taken = std::thread::scope(|scope| scope.spawn(|| RNG_LOCK.try_lock().is_ok()).join());
        assert_eq!(taken.ok(), Some(false), "another thread cannot take it");
        drop(outer);
        assert!(!HELD.with(Cell::get));
    }

    /// A seeded initialisation, and a seeded training forward pass under `rng_lock`, draw
    /// exactly their own numbers while another thread keeps building models (as an
    /// evaluation stage does beside a training one). With `Model::init` drawing its lazy
    /// parameters after releasing the lock, this failed in 3 runs of 4.
    #[test]
    fn seeded_draws_are_exact_while_another_thread_builds_models() {
        let device = Device::flex().autodiff();
        let config = ModelConfig::new(Family::SliceDiag, Size::D128);
        let ids =
            Tensor::<2, Int>::from_data([[20480, 1310, 5000, 77], [20480, 9, 4000, 12]], &device);
        let seeded_run = || {
            let model = Model::init_seeded(&config, &device, 7).unwrap();
            let _rng = rng_lock();
            device.seed(11);
            let logits = model.logits(ids.clone()).into_data();
            (weight_bits(&model), logits)
        };
        let (weights, logits) = seeded_run();
        let stop = AtomicBool::new(false);
        let built = AtomicUsize::new(0);
        let rounds = std::thread::scope(|scope| {
            scope.spawn(|| {
                let other = ModelConfig::new(Family::Mamba2, Size::D128);
                while !stop.load(Ordering::Relaxed) {
                    Model::init(&other, &Device::flex()).unwrap();
                    params_of(&other).unwrap();
                    built.fetch_add(1, Ordering::Relaxed);
                }
            });
            // The other thread stops however this ends (the scope waits for it); the rounds
            // are compared after it.
            let _stop = SetOnDrop(&stop);
            (0..40).map(|_| seeded_run()).collect::<Vec<_>>()
        });
        for (round, (w, l)) in rounds.into_iter().enumerate() {
            assert!(w == weights, "round {round}: the seeded weights differ");
            assert_eq!(l, logits, "round {round}: the seeded dropout masks differ");
        }
        assert!(
            built.load(Ordering::Relaxed) > 0,
            "the other thread built models meanwhile"
        );
    }
}
