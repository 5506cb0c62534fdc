//! The reference metrics (spec A.5): per-step correct-label counts on the device, then
//! ExactState, Labelwise, Trajectory exactness, prefix bins and the loss accumulated on the host.

use burn::prelude::*;

use crate::error::ModelError;
use crate::head::{N_LABELS, class_views};
use crate::loss::{StateLoss, check_shapes};

/// Number of labels (0..=75) whose argmax equals the target at each step. Ties in the argmax
/// go to the first maximal class.
///
/// # Shapes
/// - `logits`: `[batch, seq, 1878]`
/// - `targets`: `[batch, seq, 75]`
/// - output: `[batch, seq]`
///
/// # Errors
/// [`ModelError::Shape`] when the shapes do not fit together.
pub fn correct_counts(
    logits: Tensor<3>,
    targets: Tensor<3, Int>,
) -> Result<Tensor<2, Int>, ModelError> {
    check_shapes(&logits, &targets)?;
    let [batch, seq, _] = logits.dims();
    let mut total: Option<Tensor<3, Int>> = None;
    for (first_label, view) in class_views(logits) {
        let [_, _, n_labels, _] = view.dims();
        let predicted = view.argmax(3).reshape([batch, seq, n_labels]);
        let target = targets.clone().narrow(2, first_label, n_labels);
        let hits = predicted.equal(target).int().sum_dim(2); // [batch, seq, 1]
        total = Some(match total {
            Some(acc) => acc + hits,
            None => hits,
        });
    }
    let total = total.ok_or_else(|| ModelError::Shape("no label groups".into()))?;
    Ok(total.reshape([batch, seq]))
}

/// Counts of one prefix bin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BinCounts {
    /// Valid steps in the bin.
    pub n_steps: u64,
    /// Of those, steps with all 75 labels right.
    pub n_exact: u64,
    /// Correct labels summed over the bin's valid steps.
    pub n_correct: u64,
}

impl BinCounts {
    /// ExactState restricted to the bin (0 when empty).
    pub fn full_exact(&self) -> f64 {
        ratio(self.n_exact as f64, self.n_steps)
    }

    /// Labelwise accuracy restricted to the bin (0 when empty).
    pub fn partial_exact(&self) -> f64 {
        ratio(self.n_correct as f64 / N_LABELS as f64, self.n_steps)
    }
}

fn ratio(numerator: f64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator / denominator as f64
    }
}

/// Host-side accumulator of the reference metrics over any number of batches.
#[derive(Debug, Clone, PartialEq)]
pub struct StateMetrics {
    bin_size: usize,
    /// All valid steps, binned by step index.
    bins: Vec<BinCounts>,
    n_sequences: u64,
    n_exact_sequences: u64,
    loss_sum: f64,
    loss_denom: f64,
}

impl StateMetrics {
    /// An empty accumulator; `bin_size` is the width of the prefix bins (reference: 20).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when `bin_size` is 0.
    pub fn new(bin_size: usize) -> Result<Self, ModelError> {
        if bin_size == 0 {
            return Err(ModelError::InvalidConfig {
                field: "bin_size",
                reason: "must be at least 1".into(),
            });
        }
        Ok(Self {
            bin_size,
            bins: Vec::new(),
            n_sequences: 0,
            n_exact_sequences: 0,
            loss_sum: 0.0,
            loss_denom: 0.0,
        })
    }

    /// Adds one batch.
    ///
    /// `correct` holds the batch's [`correct_counts`] row-major (`lengths.len()` rows of
    /// `seq_len`); `lengths[b]` is the number of valid steps of sequence `b`. `loss_sum` and
    /// `loss_denom` are the batch's [`crate::StateLoss`] sums.
    ///
    /// # Errors
    /// [`ModelError::Shape`] when the buffer and lengths disagree or a count exceeds 75.
    pub fn add_batch(
        &mut self,
        correct: &[i64],
        seq_len: usize,
        lengths: &[usize],
        loss_sum: f64,
        loss_denom: f64,
    ) -> Result<(), ModelError> {
        if correct.len() != lengths.len() * seq_len {
            return Err(ModelError::Shape(format!(
                "{} correct counts for {} sequences of {seq_len} steps",
                correct.len(),
                lengths.len()
            )));
        }
        if let Some(&bad) = lengths.iter().find(|&&len| len > seq_len) {
            return Err(ModelError::Shape(format!(
                "length {bad} exceeds sequence length {seq_len}"
            )));
        }
        if let Some(&bad) = correct
            .iter()
            .find(|&&c| !(0..=N_LABELS as i64).contains(&c))
        {
            return Err(ModelError::Shape(format!(
                "correct count {bad} is outside 0..=75"
            )));
        }
        for (row, &len) in correct.chunks(seq_len.max(1)).zip(lengths) {
            let mut all_exact = true;
            for (step, &count) in row[..len].iter().enumerate() {
                let bin = step / self.bin_size;
                if bin >= self.bins.len() {
                    self.bins.resize(bin + 1, BinCounts::default());
                }
                let exact = count == N_LABELS as i64;
                all_exact &= exact;
                let counts = &mut self.bins[bin];
                counts.n_steps += 1;
                counts.n_exact += u64::from(exact);
                counts.n_correct += count as u64;
            }
            self.n_sequences += 1;
            self.n_exact_sequences += u64::from(all_exact);
        }
        self.loss_sum += loss_sum;
        self.loss_denom += loss_denom;
        Ok(())
    }

    /// Adds one batch straight from the device: `correct` from [`correct_counts`]
    /// (`[batch, seq]`, any integer dtype) and the batch's [`StateLoss`].
    ///
    /// # Errors
    /// As [`StateMetrics::add_batch`]; [`ModelError::Shape`] when the data cannot be read back.
    pub fn add_tensors(
        &mut self,
        correct: Tensor<2, Int>,
        lengths: &[usize],
        loss: &StateLoss,
    ) -> Result<(), ModelError> {
        let [_, seq_len] = correct.dims();
        let read = |data: TensorData| -> Result<Vec<f64>, ModelError> {
            data.convert::<f64>()
                .try_to_vec::<f64>()
                .map_err(|err| ModelError::Shape(format!("cannot read back a tensor: {err:?}")))
        };
        let counts = correct
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .map_err(|err| {
                ModelError::Shape(format!("cannot read back correct counts: {err:?}"))
            })?;
        let loss_sum = read(loss.loss_sum.to_data())?
            .first()
            .copied()
            .unwrap_or(0.0);
        let denom = read(loss.denom.to_data())?.first().copied().unwrap_or(0.0);
        self.add_batch(&counts, seq_len, lengths, loss_sum, denom)
    }

    fn totals(&self) -> BinCounts {
        self.bins
            .iter()
            .fold(BinCounts::default(), |acc, bin| BinCounts {
                n_steps: acc.n_steps + bin.n_steps,
                n_exact: acc.n_exact + bin.n_exact,
                n_correct: acc.n_correct + bin.n_correct,
            })
    }

    /// Number of valid steps seen.
    pub fn n_steps(&self) -> u64 {
        self.totals().n_steps
    }

    /// ExactState (`full_exact`): the fraction of valid steps with all 75 labels right.
    pub fn full_exact(&self) -> f64 {
        self.totals().full_exact()
    }

    /// Labelwise (`partial_exact`): the mean fraction of labels right over valid steps.
    pub fn partial_exact(&self) -> f64 {
        self.totals().partial_exact()
    }

    /// `(1 − partial_exact) · 75`, as the reference's report prints it.
    pub fn avg_wrong(&self) -> f64 {
        (1.0 - self.partial_exact()) * N_LABELS as f64
    }

    /// Trajectory exactness (`game_exact`): the fraction of sequences with every valid step
    /// exact (0 when no sequence was seen).
    pub fn game_exact(&self) -> f64 {
        ratio(self.n_exact_sequences as f64, self.n_sequences)
    }

    /// `(game_exact_num, game_exact_denom)`.
    pub fn game_exact_counts(&self) -> (u64, u64) {
        (self.n_exact_sequences, self.n_sequences)
    }

    /// Σ loss_sum / Σ denom over the batches (0 when nothing was counted).
    pub fn loss(&self) -> f64 {
        if self.loss_denom > 0.0 {
            self.loss_sum / self.loss_denom
        } else {
            0.0
        }
    }

    /// Width of the prefix bins.
    pub fn bin_size(&self) -> usize {
        self.bin_size
    }

    /// The prefix bins: bin `k` covers step indices `[k·bin_size, (k+1)·bin_size)`, step 0 being
    /// the start position; there are as many as the longest sequence seen needs.
    pub fn bins(&self) -> &[BinCounts] {
        &self.bins
    }
}
