//! Fitting one probe: Adam on the mean cross-entropy per label, minibatches of vectors in a
//! fresh order every epoch, and early stopping on a validation slice of held-out games.
//!
//! The weights start at zero (the loss is convex in them), so a fit depends only on the
//! vectors, the options and the seed.
//!
//! After every epoch the probe's loss on the validation rows decides: the epoch with the
//! lowest loss is kept, and fitting stops once `patience` epochs in a row have not beaten it
//! (or after `epochs`). Without validation rows the fitting loss decides instead.

use burn::nn::{Initializer, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use cwm_formats::probe::LayerFit;

use crate::ProbeError;
use crate::linear::{LinearProbe, labels_of, labels_tensor, outputs_of, read_f32, summed_nll};
use crate::sample::Rng;

/// How a probe is fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// Most epochs (at least 1).
    pub epochs: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Vectors per Adam step (at least 1).
    pub batch: usize,
    /// Epochs without a better validation loss before stopping (at least 1).
    pub patience: usize,
    /// Label groups read (1 = the 64 squares, 7 = all 75 labels).
    pub groups: usize,
    /// Seeds the order vectors are visited in.
    pub seed: u64,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            epochs: 15,
            lr: 1e-3,
            batch: 256,
            patience: 3,
            groups: 1,
            seed: 0,
        }
    }
}

/// The vectors a probe is fitted on: `x` `[n, d]` row-major, the 75 labels of each row, and
/// which rows fit and which validate.
#[derive(Debug, Clone, Copy)]
pub struct FitData<'a> {
    /// Hidden states, `[n, d]` row-major.
    pub x: &'a [f32],
    /// The width d.
    pub d: usize,
    /// 75 labels per row.
    pub labels: &'a [u8],
    /// Rows the probe is fitted on.
    pub train: &'a [usize],
    /// Rows that choose the epoch.
    pub val: &'a [usize],
}

/// Fits a probe on `data` with `options` (computing on `device`, gradients on its autodiff
/// twin); `layer` only labels the report.
///
/// # Errors
/// [`ProbeError::Invalid`] for no fitting rows or a zero option; [`ProbeError::Readback`] when
/// the backend cannot hand a result back; [`ProbeError::Cancelled`] when `cancelled` says so
/// between epochs.
pub fn fit_probe(
    data: FitData<'_>,
    options: &FitOptions,
    layer: u32,
    device: &Device,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<(LinearProbe, LayerFit), ProbeError> {
    check(&data, options)?;
    let ad = device.clone().autodiff();
    let n = data.x.len() / data.d;
    let all: Vec<usize> = (0..n).collect();
    let x_all = crate::linear::rows_tensor(data.x, data.d, &all, &ad);
    let y_all = labels_tensor(data.labels, &all, options.groups, &ad);
    // Zero weights: the loss is convex in them, and the fit depends on nothing but the data,
    // the options and the seed.
    let mut linear = LinearConfig::new(data.d, outputs_of(options.groups))
        .with_initializer(Initializer::Zeros)
        .init(&ad);
    let mut optim = AdamConfig::new().with_epsilon(1e-8).init();
    let mut order = data.train.to_vec();
    let mut rng = Rng::new(options.seed ^ u64::from(layer).rotate_left(32));
    let mut best: Option<(f64, LinearProbe, LayerFit)> = None;
    let mut epoch = 0;
    while epoch < options.epochs {
        if cancelled() {
            return Err(ProbeError::Cancelled);
        }
        epoch += 1;
        rng.shuffle(&mut order);
        for chunk in order.chunks(options.batch) {
            let index = Tensor::<1, Int>::from_data(
                TensorData::new(chunk.iter().map(|&r| r as i64).collect(), [chunk.len()]),
                &ad,
            );
            let xs = x_all.clone().select(0, index.clone());
            let ys = y_all.clone().select(0, index);
            let scale = 1.0 / (chunk.len() * labels_of(options.groups)) as f64;
            let loss = summed_nll(linear.forward(xs), ys, options.groups).mul_scalar(scale);
            let grads = GradientsParams::from_grads(loss.backward(), &linear);
            linear = optim.step(options.lr, linear, grads);
        }
        let probe = to_host(&linear, data.d, options.groups)?;
        let val_loss = probe.mean_loss(data.x, data.labels, data.val, device)?;
        // The fitting loss is read only when it decides (no validation rows) or is kept.
        let mut train_loss = None;
        let score = match val_loss {
            Some(v) => v,
            None => {
                train_loss = probe.mean_loss(data.x, data.labels, data.train, device)?;
                train_loss.unwrap_or(f64::INFINITY)
            }
        };
        let better = best.as_ref().is_none_or(|(s, ..)| score < *s);
        if better {
            if train_loss.is_none() {
                train_loss = probe.mean_loss(data.x, data.labels, data.train, device)?;
            }
            let fit = LayerFit {
                layer,
                epochs: 0,
                best_epoch: epoch as u32,
                val_loss,
                train_loss,
            };
            best = Some((score, probe, fit));
        } else if best
            .as_ref()
            .is_some_and(|(.., fit)| epoch - fit.best_epoch as usize >= options.patience)
        {
            break;
        }
    }
    let (_, probe, mut fit) =
        best.ok_or_else(|| ProbeError::Invalid("a probe ran no epoch".into()))?;
    fit.epochs = epoch as u32;
    Ok((probe, fit))
}

fn check(data: &FitData<'_>, options: &FitOptions) -> Result<(), ProbeError> {
    if data.train.is_empty() {
        return Err(ProbeError::Invalid(
            "no vectors to fit a probe on: the fitting games gave no steps".into(),
        ));
    }
    for (name, value) in [
        ("epochs", options.epochs),
        ("probe_batch", options.batch),
        ("patience", options.patience),
        ("d", data.d),
    ] {
        if value == 0 {
            return Err(ProbeError::Invalid(format!("{name} must be positive")));
        }
    }
    if !data.x.len().is_multiple_of(data.d) || data.labels.len() != data.x.len() / data.d * 75 {
        return Err(ProbeError::Invalid(format!(
            "{} hidden values and {} labels do not make rows of width {} and 75",
            data.x.len(),
            data.labels.len(),
            data.d
        )));
    }
    Ok(())
}

/// The probe's current weights, copied to the host.
fn to_host(linear: &burn::nn::Linear, d: usize, groups: usize) -> Result<LinearProbe, ProbeError> {
    let weight = read_f32(linear.weight.val(), "a probe's weights")?;
    let bias = match &linear.bias {
        Some(b) => read_f32(b.val(), "a probe's biases")?,
        None => vec![0.0; outputs_of(groups)],
    };
    Ok(LinearProbe {
        d,
        groups,
        weight,
        bias,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Rng;

    /// `n` Gaussian-ish vectors of width `d` (sums of uniforms), row-major.
    fn features(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut unit = || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        (0..n * d).map(|_| unit() + unit() + unit()).collect()
    }

    /// Squares whose class the planted code carries (the others are always empty).
    const ACTIVE: [usize; 4] = [0, 9, 36, 63];

    /// Vectors carrying a planted linear code, and their labels: each active square takes a
    /// class drawn uniformly, and the vector is `A · onehot + noise`, with `A` a random
    /// `d × (4 · 13)` matrix (`d` ≥ 52, so the code is linearly decodable); the other labels
    /// are 0.
    fn planted(n: usize, d: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
        let code = features(ACTIVE.len() * 13, d, seed);
        let noise = features(n, d, seed + 1);
        let mut rng = Rng::new(seed + 2);
        let mut labels = vec![0u8; n * 75];
        let mut x = vec![0.0f32; n * d];
        for r in 0..n {
            let row = &mut x[r * d..(r + 1) * d];
            for (i, &s) in ACTIVE.iter().enumerate() {
                let c = rng.below(13);
                labels[r * 75 + s] = c as u8;
                let column = &code[(i * 13 + c) * d..(i * 13 + c + 1) * d];
                for (v, a) in row.iter_mut().zip(column) {
                    *v += a;
                }
            }
            for (v, e) in row.iter_mut().zip(&noise[r * d..(r + 1) * d]) {
                *v += 0.05 * e;
            }
        }
        (x, labels)
    }

    /// Accuracy of `probe` on the rows `rows`, over the squares `squares`.
    fn accuracy(
        probe: &LinearProbe,
        x: &[f32],
        labels: &[u8],
        rows: &[usize],
        squares: &[usize],
    ) -> f64 {
        let pred = probe.predict(x, rows, &Device::flex()).unwrap();
        let right = rows
            .iter()
            .enumerate()
            .flat_map(|(i, &r)| squares.iter().map(move |&s| (i, r, s)))
            .filter(|&(i, r, s)| pred[i * 64 + s] == labels[r * 75 + s])
            .count();
        right as f64 / (rows.len() * squares.len()) as f64
    }

    fn fit(x: &[f32], labels: &[u8], d: usize, n_fit: usize, val: &[usize]) -> LinearProbe {
        let train: Vec<usize> = (0..n_fit).collect();
        let data = FitData {
            x,
            d,
            labels,
            train: &train,
            val,
        };
        let options = FitOptions {
            epochs: 40,
            lr: 1e-2,
            batch: 128,
            ..FitOptions::default()
        };
        fit_probe(data, &options, 0, &Device::flex(), &|| false)
            .unwrap()
            .0
    }

    #[test]
    fn a_planted_linear_code_is_read_back_on_held_out_vectors() {
        let (n, d) = (3000, 96);
        let (x, labels) = planted(n, d, 1);
        let val: Vec<usize> = (2500..2750).collect();
        let probe = fit(&x, &labels, d, 2500, &val);
        let test: Vec<usize> = (2750..n).collect();
        let active = accuracy(&probe, &x, &labels, &test, &ACTIVE);
        let all: Vec<usize> = (0..64).collect();
        let every = accuracy(&probe, &x, &labels, &test, &all);
        assert!(
            active >= 0.99 && every >= 0.99,
            "held-out accuracy {active} (coded squares), {every} (all)"
        );
    }

    #[test]
    fn shuffled_labels_leave_the_probe_at_chance() {
        let (n, d) = (3000, 96);
        let (x, labels) = planted(n, d, 1);
        // Shuffle whole label rows across vectors: the code is gone, the class mix stays.
        let mut rows: Vec<usize> = (0..n).collect();
        Rng::new(9).shuffle(&mut rows);
        let labels: Vec<u8> = rows
            .iter()
            .flat_map(|&r| labels[r * 75..(r + 1) * 75].to_vec())
            .collect();
        let val: Vec<usize> = (2500..2750).collect();
        let probe = fit(&x, &labels, d, 2500, &val);
        let test: Vec<usize> = (2750..n).collect();
        let acc = accuracy(&probe, &x, &labels, &test, &ACTIVE);
        // The coded classes are uniform over 13: chance is 1/13 ≈ 0.077.
        assert!(acc < 0.15, "held-out accuracy {acc} on shuffled labels");
    }

    #[test]
    fn early_stopping_keeps_the_best_epoch_and_reports_it() {
        let (n, d) = (400, 64);
        let (x, labels) = planted(n, d, 3);
        let train: Vec<usize> = (0..300).collect();
        let val: Vec<usize> = (300..n).collect();
        let data = FitData {
            x: &x,
            d,
            labels: &labels,
            train: &train,
            val: &val,
        };
        let options = FitOptions {
            epochs: 6,
            ..FitOptions::default()
        };
        let (_, fit) = fit_probe(data, &options, 2, &Device::flex(), &|| false).unwrap();
        assert_eq!(fit.layer, 2);
        assert!(fit.best_epoch >= 1 && fit.best_epoch <= fit.epochs && fit.epochs <= 6);
        assert!(fit.val_loss.is_some_and(f64::is_finite) && fit.train_loss.is_some());
    }

    #[test]
    fn no_fitting_rows_and_zero_options_are_refused() {
        let data = FitData {
            x: &[0.0; 4],
            d: 2,
            labels: &[0; 150],
            train: &[],
            val: &[],
        };
        let err = fit_probe(data, &FitOptions::default(), 0, &Device::flex(), &|| false);
        assert!(matches!(err, Err(ProbeError::Invalid(m)) if m.contains("no vectors")));
        let data = FitData {
            train: &[0],
            ..data
        };
        let zero = FitOptions {
            batch: 0,
            ..FitOptions::default()
        };
        let err = fit_probe(data, &zero, 0, &Device::flex(), &|| false);
        assert!(matches!(err, Err(ProbeError::Invalid(m)) if m.contains("probe_batch")));
        let err = fit_probe(data, &FitOptions::default(), 0, &Device::flex(), &|| true);
        assert!(matches!(err, Err(ProbeError::Cancelled)));
    }
}
