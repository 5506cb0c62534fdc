//! The learning-rate multiplier λ(s) of spec D.2.
//!
//! `s` is the number of scheduler steps taken so far (optimizer updates, not counting skipped
//! batches); optimizer update `n` (1-based) uses `λ(n − 1)`. With `W` warm-up steps, `S` decay
//! steps and floor ratio `r`:
//!
//! * `none`: λ = 1 always — **no warm-up at all**, exactly as the reference (which builds no
//!   scheduler in that case, whatever `W` says).
//! * otherwise, while `s < W`: λ = max((s + 1)/W, 1e−8);
//! * `constant`, `s ≥ W`: λ = 1 (the paper's first stage, "linear warm-up then constant"; the
//!   reference writes it as `cosine` with r = 1, which gives the same λ at every step);
//! * `cosine`, `s ≥ W`: p = (min(s, S) − W)/(S − W), λ = r + (1 − r)·½(1 + cos πp) (stays at `r`
//!   after `S`);
//! * `linear`, `s ≥ W`: λ = r + (1 − r)(1 − p).

use crate::TrainError;

/// Which schedule multiplies the base learning rate (the `schedule` of the training
/// configuration's schedule section).
pub use cwm_formats::train::ScheduleKind;

/// A learning-rate schedule: the multiplier of the base learning rate at each scheduler step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// The kind.
    pub kind: ScheduleKind,
    /// Warm-up steps `W`.
    pub warmup_steps: u64,
    /// Decay steps `S`.
    pub decay_steps: u64,
    /// Floor ratio `r`.
    pub min_ratio: f64,
}

impl Schedule {
    /// A schedule, checked against the reference's requirements (for `cosine` and `linear`:
    /// S > 0, 0 ≤ W < S, 0 < r ≤ 1; `none` and `constant` have no decay to check).
    ///
    /// # Errors
    /// [`TrainError::Config`] naming the violated requirement.
    pub fn new(
        kind: ScheduleKind,
        warmup_steps: u64,
        decay_steps: u64,
        min_ratio: f64,
    ) -> Result<Schedule, TrainError> {
        if matches!(kind, ScheduleKind::Cosine | ScheduleKind::Linear) {
            if decay_steps == 0 {
                return Err(TrainError::Config(
                    "lr_decay_steps must be positive for a cosine or linear schedule".into(),
                ));
            }
            if warmup_steps >= decay_steps {
                return Err(TrainError::Config(format!(
                    "warmup_steps ({warmup_steps}) must be less than lr_decay_steps ({decay_steps})"
                )));
            }
            if !(min_ratio > 0.0 && min_ratio <= 1.0) {
                return Err(TrainError::Config(format!(
                    "lr_min_ratio must be in (0, 1], got {min_ratio}"
                )));
            }
        }
        Ok(Schedule {
            kind,
            warmup_steps,
            decay_steps,
            min_ratio,
        })
    }

    /// λ(s), the multiplier after `s` scheduler steps.
    pub fn multiplier(&self, s: u64) -> f64 {
        if self.kind == ScheduleKind::None {
            return 1.0;
        }
        let (w, big_s, r) = (self.warmup_steps, self.decay_steps, self.min_ratio);
        if s < w {
            return ((s as f64 + 1.0) / w as f64).max(1e-8);
        }
        if self.kind == ScheduleKind::Constant {
            return 1.0;
        }
        let p = (s.min(big_s) - w) as f64 / (big_s - w) as f64;
        match self.kind {
            ScheduleKind::Cosine => r + (1.0 - r) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos()),
            ScheduleKind::Linear => r + (1.0 - r) * (1.0 - p),
            ScheduleKind::None | ScheduleKind::Constant => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }

    #[test]
    fn none_is_constant_and_ignores_warmup() {
        let s = Schedule::new(ScheduleKind::None, 100, 0, 0.1).unwrap();
        for step in [0, 1, 50, 99, 100, 10_000] {
            assert_eq!(s.multiplier(step), 1.0);
        }
    }

    #[test]
    fn constant_warms_up_then_equals_cosine_with_floor_one() {
        let constant = Schedule::new(ScheduleKind::Constant, 4, 0, 0.1).unwrap();
        let cosine_r1 = Schedule::new(ScheduleKind::Cosine, 4, 1_000, 1.0).unwrap();
        for step in [0, 1, 3, 4, 5, 500, 999, 1_000, 50_000] {
            assert_eq!(
                constant.multiplier(step),
                cosine_r1.multiplier(step),
                "step {step}"
            );
        }
        close(constant.multiplier(0), 0.25);
        close(constant.multiplier(4), 1.0);
        // No decay, so neither S nor r is required.
        assert!(Schedule::new(ScheduleKind::Constant, 0, 0, 0.0).is_ok());
    }

    #[test]
    fn warmup_is_linear_from_one_over_w() {
        for kind in [ScheduleKind::Cosine, ScheduleKind::Linear] {
            let s = Schedule::new(kind, 4, 10, 0.1).unwrap();
            close(s.multiplier(0), 0.25);
            close(s.multiplier(1), 0.5);
            close(s.multiplier(3), 1.0);
        }
    }

    #[test]
    fn cosine_matches_the_formula_and_stays_at_the_floor() {
        let s = Schedule::new(ScheduleKind::Cosine, 10, 110, 0.1).unwrap();
        close(s.multiplier(10), 1.0);
        // p = 0.5: r + (1 − r)·½(1 + cos π/2) = 0.1 + 0.9·0.5
        close(s.multiplier(60), 0.55);
        // p = 0.25
        let expected = 0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * 0.25).cos());
        close(s.multiplier(35), expected);
        close(s.multiplier(110), 0.1);
        close(s.multiplier(5_000), 0.1);
    }

    #[test]
    fn linear_matches_the_formula() {
        let s = Schedule::new(ScheduleKind::Linear, 0, 100, 0.01).unwrap();
        close(s.multiplier(0), 1.0);
        close(s.multiplier(25), 0.01 + 0.99 * 0.75);
        close(s.multiplier(100), 0.01);
        close(s.multiplier(200), 0.01);
    }

    #[test]
    fn tiny_multiplier_is_floored_and_bad_configs_are_rejected() {
        // W = 0 has no warm-up branch; with huge W the first value is 1/W, floored at 1e-8.
        let s = Schedule::new(ScheduleKind::Linear, 1_000_000_000_000, u64::MAX, 0.1).unwrap();
        close(s.multiplier(0), 1e-8);
        assert!(Schedule::new(ScheduleKind::Cosine, 10, 10, 0.1).is_err());
        assert!(Schedule::new(ScheduleKind::Cosine, 0, 0, 0.1).is_err());
        assert!(Schedule::new(ScheduleKind::Linear, 0, 10, 0.0).is_err());
        assert!(Schedule::new(ScheduleKind::Linear, 0, 10, 1.5).is_err());
        assert_eq!(ScheduleKind::from_name("step"), None);
        assert_eq!(
            ScheduleKind::from_name("cosine"),
            Some(ScheduleKind::Cosine)
        );
    }
}
