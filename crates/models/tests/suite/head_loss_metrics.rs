//! The shared head split, the loss (spec A.4) and the metrics (spec A.5) on tiny hand examples.

use burn::prelude::*;
use cwm_models::{
    HEAD_OUT, LABEL_GROUPS, LossKernel, N_LABELS, StateMetrics, correct_counts, label_classes,
    split_head, state_loss, state_loss_with_kernel, valid_mask,
};

fn device() -> Device {
    Device::flex()
}

fn tensor3(values: Vec<f32>, shape: [usize; 3]) -> Tensor<3> {
    Tensor::from_data(TensorData::new(values, shape), &device())
}

fn targets3(values: Vec<i64>, shape: [usize; 3]) -> Tensor<3, Int> {
    Tensor::from_data(TensorData::new(values, shape), &device())
}

fn scalar(t: Tensor<1>) -> f64 {
    t.into_data().try_to_vec::<f32>().unwrap()[0] as f64
}

/// Logit offset of each label's first class, computed from the class counts alone.
fn label_offsets() -> Vec<usize> {
    label_classes()
        .iter()
        .scan(0, |offset, &classes| {
            let start = *offset;
            *offset += classes;
            Some(start)
        })
        .collect()
}

/// −log softmax(logits of label j)[target], in f64 straight from the definition.
fn label_ce(step_logits: &[f32], label: usize, target: usize) -> f64 {
    let offset = label_offsets()[label];
    let classes = label_classes()[label];
    let values: Vec<f64> = step_logits[offset..offset + classes]
        .iter()
        .map(|&v| v as f64)
        .collect();
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = values.iter().map(|v| (v - max).exp()).sum::<f64>().ln() + max;
    log_sum - values[target]
}

#[test]
fn head_split_follows_spec_a3() {
    let [batch, seq] = [2, 3];
    let values: Vec<f32> = (0..batch * seq * HEAD_OUT)
        .map(|i| (i % HEAD_OUT) as f32)
        .collect();
    let head = split_head(tensor3(values, [batch, seq, HEAD_OUT])).unwrap();
    assert_eq!(head.pieces.dims(), [2, 3, 64, 13]);
    assert_eq!(head.side.dims(), [2, 3, 2]);
    assert_eq!(head.castle.dims(), [2, 3, 4, 2]);
    assert_eq!(head.ep_file.dims(), [2, 3, 9]);
    assert_eq!(head.ep_rank.dims(), [2, 3, 3]);
    assert_eq!(head.halfmove.dims(), [2, 3, 2, 256]);
    assert_eq!(head.fullmove.dims(), [2, 3, 2, 256]);
    // Each entry holds its logit index: pieces logit 13·s + c, castle 834 + 2r + c,
    // halfmove 854 + 256b + c, fullmove 1366 + 256b + c.
    let at4 = |t: Tensor<4>, s: usize, c: usize| -> f32 {
        t.narrow(0, 1, 1)
            .narrow(1, 2, 1)
            .narrow(2, s, 1)
            .narrow(3, c, 1)
            .into_scalar()
    };
    assert_eq!(at4(head.pieces.clone(), 5, 7), (13 * 5 + 7) as f32);
    assert_eq!(at4(head.castle.clone(), 3, 1), (834 + 2 * 3 + 1) as f32);
    assert_eq!(at4(head.halfmove.clone(), 1, 255), (854 + 256 + 255) as f32);
    assert_eq!(at4(head.fullmove.clone(), 0, 3), (1366 + 3) as f32);
    let first = |t: Tensor<3>| -> f32 {
        t.narrow(2, 0, 1)
            .narrow(0, 0, 1)
            .narrow(1, 0, 1)
            .into_scalar()
    };
    assert_eq!(first(head.side), 832.0);
    assert_eq!(first(head.ep_file), 842.0);
    assert_eq!(first(head.ep_rank), 851.0);
    assert!(split_head(tensor3(vec![0.0; 10], [1, 1, 10])).is_err());
}

#[test]
fn loss_of_uniform_logits_is_sum_of_log_class_counts() {
    let [batch, seq] = [1, 2];
    let logits = tensor3(vec![0.0; batch * seq * HEAD_OUT], [batch, seq, HEAD_OUT]);
    let targets = targets3(vec![0; batch * seq * N_LABELS], [batch, seq, N_LABELS]);
    let valid = valid_mask(&[2], seq, &device()).unwrap();
    let loss = state_loss(logits, targets, valid).unwrap();
    // Per step: 64 ln 13 + ln 2 + 4 ln 2 + ln 9 + ln 3 + 4 ln 256; two valid steps.
    let per_step = 64.0 * 13f64.ln() + 5.0 * 2f64.ln() + 9f64.ln() + 3f64.ln() + 4.0 * 256f64.ln();
    assert!((scalar(loss.loss_sum) - 2.0 * per_step).abs() < 1e-3);
    assert_eq!(scalar(loss.denom), 150.0);
    assert!((scalar(loss.loss) - per_step / 75.0).abs() < 1e-5);
}

#[test]
fn loss_matches_hand_computation_and_masks_padding() {
    let [batch, seq] = [2, 3];
    let lengths = [3, 1];
    // Deterministic, varied logits; padded steps get wild values that must not count.
    let mut logits = vec![0f32; batch * seq * HEAD_OUT];
    let mut targets = vec![0i64; batch * seq * N_LABELS];
    let classes = label_classes();
    for (b, &length) in lengths.iter().enumerate() {
        for t in 0..seq {
            let step = b * seq + t;
            for i in 0..HEAD_OUT {
                let base = ((i * 7 + step * 13) % 17) as f32 / 4.0 - 2.0;
                logits[step * HEAD_OUT + i] = if t < length { base } else { 1e4 * base };
            }
            for j in 0..N_LABELS {
                targets[step * N_LABELS + j] = ((j * 5 + step * 3) % classes[j]) as i64;
            }
        }
    }
    let mut expected_sum = 0.0;
    for (b, &length) in lengths.iter().enumerate() {
        for t in 0..length {
            let step = b * seq + t;
            let step_logits = &logits[step * HEAD_OUT..(step + 1) * HEAD_OUT];
            for j in 0..N_LABELS {
                expected_sum += label_ce(step_logits, j, targets[step * N_LABELS + j] as usize);
            }
        }
    }
    let valid = valid_mask(&lengths, seq, &device()).unwrap();
    let loss = state_loss(
        tensor3(logits, [batch, seq, HEAD_OUT]),
        targets3(targets, [batch, seq, N_LABELS]),
        valid,
    )
    .unwrap();
    let denom = 75.0 * 4.0;
    assert_eq!(scalar(loss.denom), denom);
    assert!((scalar(loss.loss_sum) - expected_sum).abs() < 1e-3 * expected_sum.abs().max(1.0));
    assert!((scalar(loss.loss) - expected_sum / denom).abs() < 1e-5);
}

#[test]
fn loss_of_an_all_padding_batch_is_zero() {
    let logits = tensor3(vec![1.0; 2 * HEAD_OUT], [1, 2, HEAD_OUT]);
    let targets = targets3(vec![0; 2 * N_LABELS], [1, 2, N_LABELS]);
    let loss = state_loss(logits, targets, valid_mask(&[0], 2, &device()).unwrap()).unwrap();
    assert_eq!(scalar(loss.loss), 0.0);
    assert_eq!(scalar(loss.denom), 0.0);
}

#[test]
fn shape_errors_are_reported() {
    let logits = tensor3(vec![0.0; HEAD_OUT], [1, 1, HEAD_OUT]);
    let targets = targets3(vec![0; 74], [1, 1, 74]);
    assert!(
        state_loss(
            logits.clone(),
            targets,
            valid_mask(&[1], 1, &device()).unwrap()
        )
        .is_err()
    );
    assert!(valid_mask(&[3], 2, &device()).is_err());
    let targets = targets3(vec![0; N_LABELS], [1, 1, N_LABELS]);
    assert!(state_loss(logits, targets, valid_mask(&[1, 1], 1, &device()).unwrap()).is_err());
}

#[test]
fn correct_counts_and_ties_go_to_the_first_index() {
    // One sequence of 2 steps. All logits 0, so every argmax is class 0 (first of a tie).
    let mut logits = vec![0f32; 2 * HEAD_OUT];
    let mut targets = vec![0i64; 2 * N_LABELS];
    // Step 0: every target 0 → 75 correct.
    // Step 1: label 0 (a8) has a tie between classes 4 and 10 → predicted 4; target 4 → correct.
    //         label 64 (side) target 1 but predicted 0 → wrong.
    //         label 72 (halfmove lo) max at class 200, target 200 → correct.
    //         label 74 (fullmove lo) target 1, predicted 0 → wrong.
    logits[HEAD_OUT + 4] = 3.0;
    logits[HEAD_OUT + 10] = 3.0;
    targets[N_LABELS] = 4;
    targets[N_LABELS + 64] = 1;
    logits[HEAD_OUT + 854 + 256 + 200] = 1.0;
    targets[N_LABELS + 72] = 200;
    targets[N_LABELS + 74] = 1;
    let counts = correct_counts(
        tensor3(logits, [1, 2, HEAD_OUT]),
        targets3(targets, [1, 2, N_LABELS]),
    )
    .unwrap();
    let mut metrics = StateMetrics::new(20).unwrap();
    let zero = Tensor::<1>::zeros([1], &device());
    let loss = cwm_models::StateLoss {
        loss: zero.clone(),
        loss_sum: zero.clone(),
        denom: zero,
    };
    metrics.add_tensors(counts.clone(), &[2], &loss).unwrap();
    assert_eq!(
        (metrics.n_steps(), metrics.game_exact_counts()),
        (2, (0, 1))
    );
    assert_eq!(
        counts
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap(),
        vec![75, 73]
    );
}

#[test]
fn metrics_accumulate_like_the_reference() {
    let mut metrics = StateMetrics::new(2).unwrap();
    // Batch 1: two sequences of up to 3 steps; lengths 3 and 2 (last step of row 2 is padding
    // and holds garbage that must be ignored).
    metrics
        .add_batch(&[75, 75, 75, 75, 70, 0], 3, &[3, 2], 30.0, 375.0)
        .unwrap();
    // Batch 2: one sequence of 1 step.
    metrics.add_batch(&[74], 1, &[1], 10.0, 75.0).unwrap();
    // Valid steps: 75, 75, 75 | 75, 70 | 74 → 6 steps, 4 exact, 444 labels right.
    assert_eq!(metrics.n_steps(), 6);
    assert!((metrics.full_exact() - 4.0 / 6.0).abs() < 1e-12);
    assert!((metrics.partial_exact() - 444.0 / 75.0 / 6.0).abs() < 1e-12);
    assert!((metrics.avg_wrong() - 6.0 / 6.0).abs() < 1e-12);
    assert_eq!(metrics.game_exact_counts(), (1, 3));
    assert!((metrics.game_exact() - 1.0 / 3.0).abs() < 1e-12);
    assert!((metrics.loss() - 40.0 / 450.0).abs() < 1e-12);
    // Bins of 2 steps: bin 0 = steps 0,1 → (75,75),(75,70),(74); bin 1 = step 2 → (75).
    let bins = metrics.bins();
    assert_eq!(bins.len(), 2);
    assert_eq!(
        (bins[0].n_steps, bins[0].n_exact, bins[0].n_correct),
        (5, 3, 369)
    );
    assert_eq!(
        (bins[1].n_steps, bins[1].n_exact, bins[1].n_correct),
        (1, 1, 75)
    );
    assert!((bins[1].full_exact() - 1.0).abs() < 1e-12);
    assert!(metrics.add_batch(&[75; 5], 3, &[3, 2], 0.0, 0.0).is_err());
    assert!(metrics.add_batch(&[76], 1, &[1], 0.0, 0.0).is_err());
    assert!(StateMetrics::new(0).is_err());
    assert_eq!(LABEL_GROUPS.len(), 7);
}

/// A small head and batch for the loss-path comparisons: features `[2, 5, 8]`, lengths 5 and
/// 2, targets spread over every class range.
pub(super) fn head_batch(
    device: &Device,
) -> (burn::nn::Linear, Tensor<3>, Tensor<3, Int>, Tensor<2, Bool>) {
    let [batch, seq, d] = [2, 5, 8];
    // Fixed weights, not the backend's generator: tests run in parallel and share it.
    let mut head = burn::nn::LinearConfig::new(d, HEAD_OUT).init(device);
    let weight: Vec<f32> = (0..d * HEAD_OUT)
        .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 0.8)
        .collect();
    let bias: Vec<f32> = (0..HEAD_OUT)
        .map(|i| ((i * 31 % 17) as f32 / 17.0 - 0.5) * 0.3)
        .collect();
    head.weight = burn::module::Param::from_tensor(Tensor::from_data(
        TensorData::new(weight, [d, HEAD_OUT]),
        device,
    ));
    head.bias = Some(burn::module::Param::from_tensor(Tensor::from_data(
        TensorData::new(bias, [HEAD_OUT]),
        device,
    )));
    let features: Vec<f32> = (0..batch * seq * d)
        .map(|i| ((i * 37 % 23) as f32 / 5.0 - 2.0) * 0.7)
        .collect();
    let classes = label_classes();
    let targets: Vec<i64> = (0..batch * seq * N_LABELS)
        .map(|i| ((i * 11 + 3) % classes[i % N_LABELS]) as i64)
        .collect();
    let features = Tensor::<3>::from_data(TensorData::new(features, [batch, seq, d]), device);
    let targets =
        Tensor::<3, Int>::from_data(TensorData::new(targets, [batch, seq, N_LABELS]), device);
    let valid = valid_mask(&[5, 2], seq, device).unwrap();
    (head, features, targets, valid)
}

fn values(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The loss of [`head_batch`] by `kernel` on `device` (with autodiff): loss, sum, denominator,
/// and the gradients of the features, the head's weight and its bias.
#[allow(clippy::type_complexity)]
fn loss_and_gradients(
    device: &Device,
    kernel: LossKernel,
    lengths: [usize; 2],
) -> (f64, f64, f64, Vec<f32>, Vec<f32>, Vec<f32>) {
    let device = device.clone();
    let (head, features, targets, _) = head_batch(&device);
    let valid = valid_mask(&lengths, 5, &device).unwrap();
    let features = features.require_grad();
    let loss = state_loss_with_kernel(kernel, features.clone(), &head, targets, valid).unwrap();
    let grads = loss.loss.backward();
    let bias = head.bias.as_ref().unwrap().val();
    (
        scalar(loss.loss.clone().inner()),
        scalar(loss.loss_sum.inner()),
        scalar(loss.denom.inner()),
        values(features.grad(&grads).unwrap().reshape([10, 8]).inner()),
        values(head.weight.val().grad(&grads).unwrap().inner()),
        values(bias.grad(&grads).unwrap().reshape([1, HEAD_OUT]).inner()),
    )
}

#[test]
fn the_fused_losses_equal_the_generic_one_in_value_and_gradients() {
    let device = Device::flex().autodiff();
    for kernel in [LossKernel::FusedCpu, LossKernel::FusedDevice] {
        assert_equals_generic(&device, kernel);
    }
}

/// The device's fused loss through its kernel (`label_loss.rs`) against the generic loss, both
/// on cubecl's CPU runtime (`cargo test --release -p cwm-models --features cube-cpu --test
/// suite the_device_loss_kernel`).
#[cfg(feature = "cube-cpu")]
#[test]
fn the_device_loss_kernel_equals_the_generic_loss_in_value_and_gradients() {
    let device = cwm_models::device_by_name("cube-cpu").unwrap().autodiff();
    assert_equals_generic(&device, LossKernel::FusedDevice);
}

/// Holds `kernel` to the generic loss on `device` (with autodiff): the value, the masked sum
/// and the denominator, and the gradients of the features, the weight and the bias (max abs
/// difference < 10⁻⁶; they are a few 10⁻³ in size, so agreement to 10⁻⁷ is float rounding);
/// and on an all-padding batch, loss 0 and no gradient at all.
fn assert_equals_generic(device: &Device, kernel: LossKernel) {
    let (loss_g, sum_g, denom_g, gx_g, gw_g, gb_g) =
        loss_and_gradients(device, LossKernel::Generic, [5, 2]);
    let scale = gx_g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(scale > 1e-4, "gradient too small to compare: {scale}");
    let (loss_f, sum_f, denom_f, gx_f, gw_f, gb_f) = loss_and_gradients(device, kernel, [5, 2]);
    assert_eq!(denom_f, 75.0 * 7.0, "{kernel}");
    assert_eq!(denom_f, denom_g, "{kernel}");
    assert!(
        (loss_f - loss_g).abs() < 1e-5 * loss_g.abs(),
        "{kernel}: {loss_f} vs {loss_g}"
    );
    assert!(
        (sum_f - sum_g).abs() < 1e-5 * sum_g.abs(),
        "{kernel}: {sum_f} vs {sum_g}"
    );
    for (name, fused, generic) in [
        ("features", gx_f, &gx_g),
        ("weight", gw_f, &gw_g),
        ("bias", gb_f, &gb_g),
    ] {
        let diff = max_abs_diff(&fused, generic);
        assert!(diff < 1e-6, "{kernel}, {name}: max abs difference {diff}");
    }
    let (loss, sum, denom, gx, gw, gb) = loss_and_gradients(device, kernel, [0, 0]);
    assert_eq!((loss, sum, denom), (0.0, 0.0, 0.0), "{kernel}");
    for (name, grad) in [("features", gx), ("weight", gw), ("bias", gb)] {
        assert!(grad.iter().all(|&g| g == 0.0), "{kernel}: {name}");
    }
}

#[test]
fn loss_kernels_have_names_and_auto_resolves_by_device() {
    for kernel in LossKernel::ALL {
        assert_eq!(kernel.name().parse::<LossKernel>().unwrap(), kernel);
    }
    let err = "fused".parse::<LossKernel>().unwrap_err().to_string();
    assert!(err.contains("fused-device"), "{err}");
    let cpu = Device::flex();
    assert_eq!(
        LossKernel::Auto.on(&cpu.clone().autodiff()),
        LossKernel::FusedCpu
    );
    assert_eq!(LossKernel::Auto.on(&cpu), LossKernel::Generic);
    assert_eq!(
        LossKernel::FusedDevice.on(&cpu.autodiff()),
        LossKernel::FusedDevice
    );
}

#[test]
fn the_fused_cpu_loss_rejects_a_target_outside_its_classes() {
    let device = Device::flex().autodiff();
    let (head, features, targets, valid) = head_batch(&device);
    // Label 64 (side to move) has 2 classes.
    let mut data: Vec<i64> = targets.into_data().iter::<i64>().collect();
    data[64] = 2;
    let targets = Tensor::<3, Int>::from_data(TensorData::new(data, [2, 5, N_LABELS]), &device);
    let err =
        state_loss_with_kernel(LossKernel::FusedCpu, features, &head, targets, valid).unwrap_err();
    assert!(err.to_string().contains("outside its 2 classes"), "{err}");
}
