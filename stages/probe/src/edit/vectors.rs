//! The vectors an edit adds, and their scaling: `α · ‖h‖ · v / ‖v‖`, h the hidden state the
//! edit is added to.

use cwm_formats::edit::{VECTOR_PATCH, VECTOR_PROBE, VECTOR_PROBE_DIFF, VECTOR_RANDOM};
use cwm_models::LABEL_GROUPS;

use super::cases::{Case, EMPTY};
use crate::linear::LinearProbe;
use crate::sample::{Rng, game_key};

/// An edit direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vector {
    /// Gaussian, drawn per case and layer (the same for every α).
    Random,
    /// The hidden state three plies later.
    Patch,
    /// `−w_{s,c}`.
    Probe,
    /// `w_{s,empty} − w_{s,c}`.
    ProbeDiff,
}

impl Vector {
    /// Every edit, in table order.
    pub const ALL: [Vector; 4] = [
        Vector::Random,
        Vector::Patch,
        Vector::Probe,
        Vector::ProbeDiff,
    ];

    /// The name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Vector::Random => VECTOR_RANDOM,
            Vector::Patch => VECTOR_PATCH,
            Vector::Probe => VECTOR_PROBE,
            Vector::ProbeDiff => VECTOR_PROBE_DIFF,
        }
    }
}

/// The direction of `vector` for `case` at the layer whose probe is `probe`; `patch` is the
/// hidden state three plies later, `key` seeds the random one.
pub fn direction(
    vector: Vector,
    case: &Case,
    probe: &LinearProbe,
    patch: &[f32],
    key: u64,
) -> Vec<f32> {
    let weights = |class: u8| {
        let j = case.square * LABEL_GROUPS[0].n_classes + usize::from(class);
        probe.output_vector(j)
    };
    match vector {
        Vector::Random => gaussian(key, probe.d),
        Vector::Patch => patch.to_vec(),
        Vector::Probe => weights(case.piece).into_iter().map(|w| -w).collect(),
        Vector::ProbeDiff => weights(EMPTY)
            .into_iter()
            .zip(weights(case.piece))
            .map(|(e, c)| e - c)
            .collect(),
    }
}

/// The key of the random direction of `case` in game `game_id` at `layer`.
pub fn random_key(seed: u64, game_id: &str, case: &Case, layer: usize) -> u64 {
    seed ^ game_key(&format!("{game_id}:{}:{}:{layer}", case.t, case.square))
}

/// `alpha · ‖h‖ · v / ‖v‖`; zero when v is zero.
pub fn scaled(h: &[f32], v: &[f32], alpha: f64) -> Vec<f32> {
    let norm = |x: &[f32]| x.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
    let v_norm = norm(v);
    if v_norm == 0.0 {
        return vec![0.0; v.len()];
    }
    let scale = alpha * norm(h) / v_norm;
    v.iter().map(|&a| (f64::from(a) * scale) as f32).collect()
}

/// `d` standard normal numbers from the generator keyed by `key` (Box–Muller).
pub fn gaussian(key: u64, d: usize) -> Vec<f32> {
    let mut rng = Rng::new(key);
    let mut uniform = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut out = Vec::with_capacity(d + 1);
    while out.len() < d {
        let (u1, u2) = (uniform(), uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let angle = std::f64::consts::TAU * u2;
        out.push((r * angle.cos()) as f32);
        out.push((r * angle.sin()) as f32);
    }
    out.truncate(d);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_sets_the_norm_to_alpha_times_the_hidden_norm() {
        let h = [3.0, 4.0];
        let v = scaled(&h, &[0.0, 2.0], 2.0);
        assert_eq!(v, vec![0.0, 10.0]);
        assert_eq!(scaled(&h, &[0.0, 0.0], 2.0), vec![0.0, 0.0]);
        assert_eq!(scaled(&h, &[1.0, 1.0], 0.0), vec![0.0, 0.0]);
    }

    #[test]
    fn gaussian_draws_are_repeatable_and_standard() {
        let x = gaussian(5, 20_001);
        assert_eq!(x, gaussian(5, 20_001));
        assert_ne!(x, gaussian(6, 20_001));
        let n = x.len() as f64;
        let mean = x.iter().map(|&a| f64::from(a)).sum::<f64>() / n;
        let var = x
            .iter()
            .map(|&a| (f64::from(a) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }

    #[test]
    fn probe_directions_point_away_from_the_piece() {
        // d = 2, square group only: w_{s,c} is column s·13 + c of the [d, 832] weight.
        let outputs = LABEL_GROUPS[0].n_logits();
        let mut weight = vec![0.0; 2 * outputs];
        let case = Case {
            game: 0,
            t: 1,
            square: 3,
            piece: 2,
            targets: vec![],
        };
        let col = |c: usize| 3 * 13 + c;
        weight[col(2)] = 1.0; // w_{s,c} = (1, 0)
        weight[outputs + col(0)] = 1.0; // w_{s,empty} = (0, 1)
        let probe = LinearProbe {
            d: 2,
            groups: 1,
            weight,
            bias: vec![0.0; outputs],
        };
        let probe_dir = direction(Vector::Probe, &case, &probe, &[], 0);
        assert_eq!(probe_dir, vec![-1.0, 0.0]);
        let diff = direction(Vector::ProbeDiff, &case, &probe, &[], 0);
        assert_eq!(diff, vec![-1.0, 1.0]);
        let patch = direction(Vector::Patch, &case, &probe, &[7.0, 8.0], 0);
        assert_eq!(patch, vec![7.0, 8.0]);
    }
}
