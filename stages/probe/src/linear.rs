//! A linear probe: logits `x · W + b` laid out like the model's own head, cut into the first
//! `groups` label groups of [`LABEL_GROUPS`] (1 = the 64 squares, 7 = all 75 labels), each
//! label a softmax over its classes.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use cwm_models::{LABEL_GROUPS, LabelGroup};

use crate::ProbeError;

/// Rows per forward pass when a probe scores many vectors.
const CHUNK_ROWS: usize = 8192;

/// The label groups a probe of `groups` groups predicts.
pub fn groups_of(groups: usize) -> &'static [LabelGroup] {
    &LABEL_GROUPS[..groups.clamp(1, LABEL_GROUPS.len())]
}

/// Labels read by a probe of `groups` groups (64 or 75).
pub fn labels_of(groups: usize) -> usize {
    groups_of(groups)
        .last()
        .map_or(0, |g| g.first_label + g.n_labels)
}

/// Logits of a probe of `groups` groups (832 or 1,878).
pub fn outputs_of(groups: usize) -> usize {
    groups_of(groups)
        .last()
        .map_or(0, |g| g.logit_offset + g.n_logits())
}

/// A fitted probe, on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearProbe {
    /// The hidden width d.
    pub d: usize,
    /// Label groups read.
    pub groups: usize,
    /// `[d, outputs]`, row-major (burn's layout: logits = x · W + b).
    pub weight: Vec<f32>,
    /// `[outputs]`.
    pub bias: Vec<f32>,
}

impl LinearProbe {
    /// Logits per probe output.
    pub fn outputs(&self) -> usize {
        outputs_of(self.groups)
    }

    /// The weights of output `j` (a column of `W`): the direction in hidden space that raises
    /// that logit.
    pub fn output_vector(&self, j: usize) -> Vec<f32> {
        let outputs = self.outputs();
        (0..self.d).map(|i| self.weight[i * outputs + j]).collect()
    }

    /// Logits of `x` (`[n, d]`), `[n, outputs]`.
    pub fn logits(&self, x: Tensor<2>) -> Tensor<2> {
        let device = x.device();
        let w = Tensor::<2>::from_data(
            TensorData::new(self.weight.clone(), [self.d, self.outputs()]),
            &device,
        );
        let b = Tensor::<1>::from_data(
            TensorData::new(self.bias.clone(), [self.outputs()]),
            &device,
        );
        x.matmul(w) + b.unsqueeze::<2>()
    }

    /// The predicted class of each label for the rows `rows` of `x` (`[n, d]` row-major), row
    /// after row (`labels_of(groups)` per row).
    ///
    /// # Errors
    /// [`ProbeError::Readback`] when the backend cannot hand the result back.
    pub fn predict(
        &self,
        x: &[f32],
        rows: &[usize],
        device: &Device,
    ) -> Result<Vec<u8>, ProbeError> {
        let mut out = Vec::with_capacity(rows.len() * labels_of(self.groups));
        for chunk in rows.chunks(CHUNK_ROWS) {
            let xs = rows_tensor(x, self.d, chunk, device);
            out.extend(argmax_labels(self.logits(xs), self.groups)?);
        }
        Ok(out)
    }

    /// Mean cross-entropy per label over the rows `rows` of `x`, with `labels` the 75 true
    /// labels of every row of `x`; `None` without rows.
    ///
    /// # Errors
    /// [`ProbeError::Readback`] when the backend cannot hand the result back.
    pub fn mean_loss(
        &self,
        x: &[f32],
        labels: &[u8],
        rows: &[usize],
        device: &Device,
    ) -> Result<Option<f64>, ProbeError> {
        if rows.is_empty() {
            return Ok(None);
        }
        let mut total = 0.0f64;
        for chunk in rows.chunks(CHUNK_ROWS) {
            let xs = rows_tensor(x, self.d, chunk, device);
            let ys = labels_tensor(labels, chunk, self.groups, device);
            let loss = summed_nll(self.logits(xs), ys, self.groups);
            total += f64::from(read_f32(loss, "a probe's loss")?[0]);
        }
        Ok(Some(total / (rows.len() * labels_of(self.groups)) as f64))
    }
}

/// The rows `rows` of `x` (`[n, d]` row-major) as a `[rows, d]` tensor.
pub fn rows_tensor(x: &[f32], d: usize, rows: &[usize], device: &Device) -> Tensor<2> {
    let mut data = Vec::with_capacity(rows.len() * d);
    for &r in rows {
        data.extend_from_slice(&x[r * d..(r + 1) * d]);
    }
    Tensor::from_data(TensorData::new(data, [rows.len(), d]), device)
}

/// The first `labels_of(groups)` labels of the rows `rows` (75 labels a row) as an integer
/// tensor.
pub fn labels_tensor(
    labels: &[u8],
    rows: &[usize],
    groups: usize,
    device: &Device,
) -> Tensor<2, Int> {
    let width = labels_of(groups);
    let mut data = Vec::with_capacity(rows.len() * width);
    for &r in rows {
        let start = r * cwm_models::N_LABELS;
        data.extend(labels[start..start + width].iter().map(|&l| i64::from(l)));
    }
    Tensor::from_data(TensorData::new(data, [rows.len(), width]), device)
}

/// Σ over rows and labels of −ln p(true class): `logits` `[n, outputs]`, `targets`
/// `[n, labels]`; a one-element tensor.
pub fn summed_nll(logits: Tensor<2>, targets: Tensor<2, Int>, groups: usize) -> Tensor<1> {
    let [n, _] = logits.dims();
    let mut parts = Vec::with_capacity(groups);
    for g in groups_of(groups) {
        let view = logits
            .clone()
            .narrow(1, g.logit_offset, g.n_logits())
            .reshape([n, g.n_labels, g.n_classes]);
        let index = targets
            .clone()
            .narrow(1, g.first_label, g.n_labels)
            .unsqueeze_dim::<3>(2);
        parts.push(log_softmax(view, 2).gather(2, index).sum());
    }
    Tensor::cat(parts, 0).sum().neg()
}

/// The argmax class of every label of `logits` (`[n, outputs]` of a `groups`-group layout),
/// row after row.
///
/// # Errors
/// [`ProbeError::Readback`] when the backend cannot hand the result back.
pub fn argmax_labels(logits: Tensor<2>, groups: usize) -> Result<Vec<u8>, ProbeError> {
    let [n, _] = logits.dims();
    let parts: Vec<Tensor<2>> = groups_of(groups)
        .iter()
        .map(|g| {
            logits
                .clone()
                .narrow(1, g.logit_offset, g.n_logits())
                .reshape([n, g.n_labels, g.n_classes])
                .argmax(2)
                .float()
                .reshape([n, g.n_labels])
        })
        .collect();
    let values = read_f32(Tensor::cat(parts, 1), "predicted labels")?;
    // Class indices are below 256, exact as f32.
    Ok(values.into_iter().map(|v| v as u8).collect())
}

/// Reads a float tensor back to the host.
///
/// # Errors
/// [`ProbeError::Readback`] naming `what`.
pub fn read_f32<const D: usize>(t: Tensor<D>, what: &'static str) -> Result<Vec<f32>, ProbeError> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| ProbeError::Readback {
            what,
            message: format!("{e:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_square_layout_is_the_heads_first_group() {
        assert_eq!((labels_of(1), outputs_of(1)), (64, 832));
        assert_eq!((labels_of(7), outputs_of(7)), (75, cwm_models::HEAD_OUT));
    }

    #[test]
    fn a_probe_predicts_and_scores_the_class_its_weights_favour() {
        let device = Device::flex();
        // d = 1, x = 1: bias 0, and output 3·13 + 5 (square 3, class 5) the largest weight.
        let mut weight = vec![0.0f32; 832];
        weight[3 * 13 + 5] = 10.0;
        let probe = LinearProbe {
            d: 1,
            groups: 1,
            weight,
            bias: vec![0.0; 832],
        };
        let pred = probe.predict(&[1.0], &[0], &device).unwrap();
        assert_eq!(pred.len(), 64);
        assert_eq!(pred[3], 5);
        assert_eq!(pred[0], 0, "ties go to the first class");
        let mut labels = vec![0u8; 75];
        labels[3] = 5;
        let loss = probe
            .mean_loss(&[1.0], &labels, &[0], &device)
            .unwrap()
            .unwrap();
        // 63 squares at ln 13, one nearly certain.
        let expected = 63.0 * 13f64.ln() / 64.0;
        assert!((loss - expected).abs() < 1e-3, "{loss} vs {expected}");
        assert_eq!(probe.output_vector(3 * 13 + 5), vec![10.0]);
        assert_eq!(
            probe.mean_loss(&[1.0], &labels, &[], &device).unwrap(),
            None
        );
    }
}
