//! Hidden states by layer and edited forward passes (`cwm_models::hidden`), for every family:
//! the recorded pass is the plain one, a zero edit changes nothing, an edit at the head input
//! is a logit edit through the head's weight, and edits never reach earlier positions.

use burn::module::Module;
use burn::prelude::*;
use burn::tensor::Distribution;
use cwm_models::{
    Family, Model, ModelConfig, ModelError, Size, StateModel, features_by_layer,
    features_with_edit, logits_with_edit,
};

const BATCH: usize = 2;
const SEQ: usize = 6;

fn moves(device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..BATCH * SEQ)
        .map(|i| {
            if i % SEQ == 0 {
                20_480
            } else {
                ((i * 7919) % 20_480) as i64
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(ids, [BATCH, SEQ]), device)
}

fn model(family: Family, device: &Device) -> Model {
    Model::init(&ModelConfig::new(family, Size::D128), device)
        .unwrap()
        .valid()
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

/// A delta that is zero except at batch row 1, position `t`, where it is `v`.
fn delta_at(t: usize, v: Tensor<1>, d: usize, device: &Device) -> Tensor<3> {
    Tensor::<3>::zeros([BATCH, SEQ, d], device)
        .slice_assign([1..2, t..t + 1, 0..d], v.reshape([1, 1, d]))
}

#[test]
fn the_recorded_pass_is_the_plain_pass() {
    let device = Device::flex();
    for family in Family::ALL {
        let model = model(family, &device);
        let layers = features_by_layer(&model, moves(&device));
        assert_eq!(layers.len(), model.blocks() + 2, "{family}");
        let d = layers[0].dims()[2];
        for layer in &layers {
            assert_eq!(layer.dims(), [BATCH, SEQ, d], "{family}");
        }
        let plain = model.features(moves(&device));
        let last = layers.last().unwrap().clone();
        assert_eq!(
            values(last.clone()),
            values(plain),
            "{family}: the same pass, bit for bit"
        );
        let logits = model.head().forward(last);
        assert!(
            max_abs_diff(logits, model.logits(moves(&device))) < 1e-5,
            "{family}"
        );
        // The blocks change the stream: layer 1 is not the embedding.
        assert!(
            max_abs_diff(layers[0].clone(), layers[1].clone()) > 1e-4,
            "{family}"
        );
    }
}

#[test]
fn a_zero_edit_at_any_layer_changes_nothing() {
    let device = Device::flex();
    for family in Family::ALL {
        let model = model(family, &device);
        let plain = values(model.logits(moves(&device)));
        let d = model.head().weight.dims()[0];
        for layer in 0..=model.blocks() + 1 {
            let zero = Tensor::<3>::zeros([BATCH, SEQ, d], &device);
            let edited = logits_with_edit(&model, moves(&device), layer, zero).unwrap();
            assert_eq!(values(edited), plain, "{family}, layer {layer}");
        }
    }
}

#[test]
fn an_edit_at_the_head_input_moves_the_logits_by_the_head_weight() {
    let device = Device::flex();
    for family in Family::ALL {
        let model = model(family, &device);
        let [d, n_logits] = model.head().weight.dims();
        let v = Tensor::<1>::random([d], Distribution::Normal(0.0, 1.0), &device);
        let delta = delta_at(3, v.clone(), d, &device);
        let top = model.blocks() + 1;
        let edited = logits_with_edit(&model, moves(&device), top, delta).unwrap();
        let change = edited - model.logits(moves(&device)); // [batch, seq, n]
        let expected = v
            .reshape([1, d])
            .matmul(model.head().weight.val())
            .reshape([n_logits]);
        let at = change
            .clone()
            .slice([1..2, 3..4, 0..n_logits])
            .reshape([n_logits]);
        assert!(max_abs_diff(at, expected) < 1e-3, "{family}: W_head · δ");
        let elsewhere = change.clone().slice([0..1, 0..SEQ, 0..n_logits]);
        assert_eq!(
            elsewhere.abs().max().into_scalar::<f32>(),
            0.0,
            "{family}: row 0"
        );
        let others = change.slice([1..2, 0..3, 0..n_logits]);
        assert_eq!(
            others.abs().max().into_scalar::<f32>(),
            0.0,
            "{family}: before t"
        );
    }
}

#[test]
fn an_edit_never_reaches_earlier_positions_and_changes_its_own() {
    let device = Device::flex();
    for family in Family::ALL {
        let model = model(family, &device);
        let d = model.head().weight.dims()[0];
        let plain = model.features(moves(&device));
        for layer in 0..=model.blocks() {
            let v = Tensor::<1>::random([d], Distribution::Normal(0.0, 4.0), &device);
            let edited =
                features_with_edit(&model, moves(&device), layer, delta_at(3, v, d, &device))
                    .unwrap();
            let change = (edited - plain.clone()).slice([1..2, 0..SEQ, 0..d]).abs();
            let before = change
                .clone()
                .slice([0..1, 0..3, 0..d])
                .max()
                .into_scalar::<f32>();
            let at = change.slice([0..1, 3..4, 0..d]).max().into_scalar::<f32>();
            assert_eq!(before, 0.0, "{family}, layer {layer}: causal");
            assert!(
                at > 1e-4,
                "{family}, layer {layer}: the edit has an effect ({at})"
            );
        }
    }
}

#[test]
fn a_layer_past_the_head_input_or_a_misshapen_edit_is_an_error() {
    let device = Device::flex();
    let model = model(Family::Transformer, &device);
    let d = model.head().weight.dims()[0];
    let zero = Tensor::<3>::zeros([BATCH, SEQ, d], &device);
    let past = model.blocks() + 2;
    let err = features_with_edit(&model, moves(&device), past, zero).unwrap_err();
    assert!(
        matches!(err, ModelError::InvalidConfig { field: "layer", .. }),
        "{err}"
    );
    let wrong = Tensor::<3>::zeros([BATCH, SEQ + 1, d], &device);
    let err = features_with_edit(&model, moves(&device), 0, wrong).unwrap_err();
    assert!(matches!(err, ModelError::Shape(_)), "{err}");
}
