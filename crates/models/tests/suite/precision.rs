//! `Precision::Bf16`: the head's and the Mamba layers' products in bf16, the loss's bf16
//! denominator, f32 weights and gradients, and the families that refuse it.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType};
use cwm_models::{
    Family, LossKernel, Model, ModelConfig, Precision, Size, StateModel, load_model, save_model,
    state_loss, state_loss_in,
};

use super::head_loss_metrics::head_batch;

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn scalar(t: Tensor<1>) -> f32 {
    values(t)[0]
}

fn moves(device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..2 * 9)
        .map(|i| {
            if i % 9 == 0 {
                20_480
            } else {
                (i * 2_731 % 20_480) as i64
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(ids, [2, 9]), device)
}

/// How many float parameter tensors `model` has.
fn parameter_tensors(model: &Model) -> usize {
    struct Count(usize);
    impl ModuleVisitor for Count {
        fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
            self.0 += 1;
        }
    }
    let mut count = Count(0);
    model.visit(&mut count);
    count.0
}

fn bf16<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    t.cast(FloatDType::BF16).cast(FloatDType::F32)
}

#[test]
fn the_bf16_loss_is_the_f32_loss_of_bf16_logits_over_the_references_denominator() {
    let device = Device::flex().autodiff();
    let (head, features, targets, valid) = head_batch(&device);
    let mixed = state_loss_in(
        Precision::Bf16,
        LossKernel::Auto,
        features.clone(),
        &head,
        targets.clone(),
        valid.clone(),
    )
    .unwrap();
    // The oracle: logits from bf16-rounded operands, rounded to bf16, then the f32 loss.
    let w = bf16(head.weight.val());
    let b = bf16(head.bias.as_ref().unwrap().val());
    let logits = bf16(bf16(features.clone()).matmul(w.unsqueeze()) + b.unsqueeze());
    let exact = state_loss(logits, targets.clone(), valid.clone()).unwrap();
    let (got, want) = (scalar(mixed.loss_sum.clone()), scalar(exact.loss_sum));
    assert!((got - want).abs() <= 1e-3 * want.abs(), "{got} vs {want}");
    // 7 valid steps: 525 in f32; torch's bf16 running total of the seven groups gives 528.
    assert_eq!(scalar(exact.denom), 525.0);
    assert_eq!(scalar(mixed.denom.clone()), 528.0);
    assert_eq!(scalar(mixed.loss.clone()), got / 528.0);

    // The gradient reaches the f32 weights and is close to the f32 loss's.
    let f32_loss = state_loss_in(
        Precision::F32,
        LossKernel::Auto,
        features,
        &head,
        targets,
        valid,
    )
    .unwrap();
    let grad_of = |loss: Tensor<1>| {
        let grads = loss.backward();
        let g = head.weight.val().grad(&grads).unwrap();
        assert_eq!(g.dtype(), DType::F32);
        g.into_data().try_to_vec::<f32>().unwrap()
    };
    let (g_mixed, g_f32) = (grad_of(mixed.loss), grad_of(f32_loss.loss));
    let scale = g_f32.iter().fold(0.0f32, |m, g| m.max(g.abs()));
    let worst = g_mixed
        .iter()
        .zip(&g_f32)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(g_mixed.iter().all(|g| g.is_finite()));
    assert!(worst > 0.0 && worst < 0.02 * scale, "{worst} of {scale}");
}

#[test]
fn the_cpus_fused_loss_refuses_bf16() {
    let device = Device::flex().autodiff();
    let (head, features, targets, valid) = head_batch(&device);
    let kernel = LossKernel::FusedCpu;
    let err = state_loss_in(Precision::Bf16, kernel, features, &head, targets, valid)
        .unwrap_err()
        .to_string();
    assert!(err.contains("f32 only"), "{kernel}: {err}");
}

/// The loss of [`head_batch`] by `kernel` in `precision` on `device` (with autodiff): the loss,
/// its sum and denominator, then the gradients of the features, the weight and the bias.
fn loss_and_gradients(
    device: &Device,
    precision: Precision,
    kernel: LossKernel,
) -> (Vec<f32>, [Vec<f32>; 3]) {
    let (head, features, targets, valid) = head_batch(device);
    let features = features.require_grad();
    let loss = state_loss_in(precision, kernel, features.clone(), &head, targets, valid).unwrap();
    let value = vec![
        scalar(loss.loss.clone()),
        scalar(loss.loss_sum),
        scalar(loss.denom),
    ];
    let grads = loss.loss.backward();
    let bias = head.bias.as_ref().unwrap().val();
    let gradients = [
        values(features.grad(&grads).unwrap()),
        values(head.weight.val().grad(&grads).unwrap()),
        values(bias.grad(&grads).unwrap()),
    ];
    (value, gradients)
}

/// The device's fused loss in bf16 on `device` against the generic loss in bf16 on the same
/// device: the same denominator (the reference's bf16 count), the loss within float rounding,
/// and each gradient within one bf16 step (2⁻⁸) of the largest of its kind: both round the
/// logits' gradient to bf16 and multiply in bf16, so they differ only where two f32 sums round
/// to neighbouring bf16 values. (It failed with the head's gradients in f32, by 5.6 · 10⁻³ of
/// the largest, and with the steps weighted by the f32 denominator, by 9.0 · 10⁻³.)
fn assert_bf16_device_loss_is_generic(device: &Device) {
    let tolerance = 1.0 / 256.0;
    let (want, want_grads) = loss_and_gradients(device, Precision::Bf16, LossKernel::Generic);
    let (got, got_grads) = loss_and_gradients(device, Precision::Bf16, LossKernel::FusedDevice);
    assert_eq!(got[2], 528.0, "the bf16 denominator of 7 valid steps");
    assert_eq!(got[2], want[2]);
    for i in 0..2 {
        assert!(
            (got[i] - want[i]).abs() <= 1e-5 * want[i].abs(),
            "{got:?} vs {want:?}"
        );
    }
    for ((name, got), want) in ["features", "weight", "bias"]
        .iter()
        .zip(&got_grads)
        .zip(&want_grads)
    {
        let scale = want.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(scale > 0.0, "{name}: no gradient");
        assert!(worst <= tolerance * scale, "{name}: {worst} of {scale}");
    }
    // In f32 the same kernel misses the bf16 loss by far more than the comparison allows.
    let (f32_value, _) = loss_and_gradients(device, Precision::F32, LossKernel::FusedDevice);
    assert!((f32_value[0] - want[0]).abs() > 1e-4 * want[0].abs());
}

#[test]
fn the_device_loss_in_bf16_is_the_generic_bf16_loss_in_value_and_gradients() {
    assert_bf16_device_loss_is_generic(&Device::flex().autodiff());
}

/// The same on cubecl's CPU runtime, through the device loss's kernel (`cargo test --release -p
/// cwm-models --features cube-cpu --test suite the_device_loss_in_bf16`).
#[cfg(feature = "cube-cpu")]
#[test]
fn on_cube_cpu_the_device_loss_in_bf16_is_the_generic_bf16_loss() {
    let device = cwm_models::device_by_name("cube-cpu").unwrap().autodiff();
    assert_bf16_device_loss_is_generic(&device);
}

#[test]
fn a_mamba_model_in_bf16_computes_near_f32_and_trains_its_f32_weights() {
    let device = Device::flex().autodiff();
    for family in [Family::Mamba3, Family::Mamba2] {
        let model = Model::init(&ModelConfig::new(family, Size::D128), &device).unwrap();
        let exact = values(model.valid().logits(moves(&device)));
        let model = model.with_precision(Precision::Bf16).unwrap();
        assert_eq!(model.precision(), Precision::Bf16);
        let rounded = values(model.valid().logits(moves(&device)));
        let worst = exact
            .iter()
            .zip(&rounded)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst > 0.0 && worst < 0.1, "{family}: {worst}");

        let (_, _, targets, _) = head_batch(&device);
        let targets = targets.narrow(1, 0, 4).repeat_dim(1, 3).narrow(1, 0, 9);
        let valid = Tensor::<2, Bool>::from_data(TensorData::new(vec![true; 18], [2, 9]), &device);
        let loss = model.state_loss(moves(&device), targets, valid).unwrap();
        // 18 valid steps: 1,350 in f32, 1,344 as torch counts it in bf16.
        assert_eq!(scalar(loss.denom.clone()), 1_344.0, "{family}");
        let grads = GradientsParams::from_grads(loss.loss.backward(), &model);
        assert_eq!(
            grads.len(),
            parameter_tensors(&model),
            "{family}: every parameter"
        );

        let back = model.with_precision(Precision::F32).unwrap();
        assert_eq!(
            values(back.valid().logits(moves(&device))),
            exact,
            "{family}"
        );
    }
}

#[test]
fn families_without_bf16_refuse_it() {
    let device = Device::flex();
    for family in [Family::Transformer, Family::Slice, Family::GdnPos] {
        let mut config = ModelConfig::new(family, Size::D128);
        config.precision = Precision::Bf16;
        let err = Model::init(&config, &device).unwrap_err().to_string();
        assert!(err.contains("precision") && err.contains("mamba3"), "{err}");
        config.precision = Precision::F32;
        let model = Model::init(&config, &device).unwrap();
        assert!(model.with_precision(Precision::Bf16).is_err(), "{family}");
    }
}

#[test]
fn a_checkpoint_remembers_its_training_precision_and_loads_in_f32() {
    let device = Device::flex();
    let mut config = ModelConfig::new(Family::Mamba3, Size::D128);
    config.precision = Precision::Bf16;
    let model = Model::init(&config, &device).unwrap();
    let dir = std::env::temp_dir().join(format!("cwm-precision-{}", std::process::id()));
    save_model(&dir, &model, &config).unwrap();
    let (loaded, loaded_config) = load_model(&dir, &device).unwrap();
    assert_eq!(loaded_config.precision, Precision::Bf16);
    assert_eq!(loaded.precision(), Precision::F32);
    let f32_model = model.with_precision(Precision::F32).unwrap();
    assert_eq!(
        values(loaded.logits(moves(&device))),
        values(f32_model.logits(moves(&device)))
    );
    // Only now: the weights are read from the file when first used.
    std::fs::remove_dir_all(&dir).unwrap();
}
