//! The input embedding's gradient on cubecl's devices (`cuda`, `cube-cpu`): by a scatter of
//! every value at once rather than burn's `select_assign`, so that one build can time them
//! against each other on a GPU.
//!
//! burn's embedding is `select` forward and `select_assign` (with addition) backward. cubecl's
//! `select_assign` kernel gives one unit to each column of the table (`d` units: 128 to 512)
//! and has each walk all `batch · seq` rows of the gradient one after another: at the paper's
//! 32,768 tokens a step that is 32,768 dependent reads and writes per unit on a device of some
//! 17,000 lanes. An H200's profile of the transformer at d512 (2026-12-04, docs/gpu.md) found
//! that one kernel taking 11.9 ms of a 148 ms step. Here the rows are gathered instead
//! (`gather` along the table's rows with each token's row index repeated across the `d`
//! columns), whose backward pass is a scatter with addition: on a GPU burn's kernel for it
//! gives each of the `batch · seq · d` values a unit of its own and adds it atomically.
//!
//! The environment variable `CWM_EMBEDDING_GRAD` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --embedding-grad` for one run):
//!
//! | value | the embedding's gradient |
//! |---|---|
//! | unset, empty or `scatter` | a scatter of every value at once, atomic additions on a GPU |
//! | `select` | burn's `select_assign` (one unit a column) |
//!
//! Both add the same numbers; atomic additions land in no fixed order, so on a GPU the sums'
//! rounding can differ from one run to the next (burn's scatters are atomic there already).
//! Values are the same to the bit. The CPU (`flex`) always takes burn's `select_assign`,
//! whatever the setting, and so does a forward pass without a gradient (evaluation).

use burn::nn::Embedding;
use burn::prelude::*;

use crate::env_setting::ProcessSetting;

/// The environment variable [`EMBEDDING_GRAD`] is read from.
pub const EMBEDDING_GRAD_VAR: &str = "CWM_EMBEDDING_GRAD";

/// The process's setting (the module docs).
pub static EMBEDDING_GRAD: ProcessSetting<EmbeddingGrad> = ProcessSetting::new(EMBEDDING_GRAD_VAR);

/// How cubecl's devices compute the input embedding's gradient.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EmbeddingGrad {
    /// Gathered forward, scattered backward: a unit per value.
    #[default]
    Scatter,
    /// burn's `select` and `select_assign`: a unit per column.
    Select,
}

crate::env_setting::setting_names!(EmbeddingGrad {
    Scatter => "scatter",
    Select => "select",
});

/// `embedding`'s rows for `moves` (`[batch, seq]` → `[batch, seq, d]`): the values of
/// `embedding.forward(moves)`, with the gradient by a scatter where the module docs say so.
pub fn embed(embedding: &Embedding, moves: Tensor<2, Int>) -> Tensor<3> {
    let weight = embedding.weight.val();
    if scatters(&weight) {
        embed_by_gather(weight, moves)
    } else {
        embedding.forward(moves)
    }
}

/// Whether [`embed`] gathers `weight`'s rows: on cubecl's devices, for a table whose gradient
/// is wanted, unless the setting is `select`.
fn scatters(weight: &Tensor<2>) -> bool {
    let setting = EMBEDDING_GRAD.chosen().unwrap_or_default();
    setting == EmbeddingGrad::Scatter
        && weight.is_require_grad()
        && weight.device() != Device::flex()
}

/// `weight`'s rows for `moves` by `gather`, whose backward pass is a scatter with addition.
fn embed_by_gather(weight: Tensor<2>, moves: Tensor<2, Int>) -> Tensor<3> {
    let [batch, seq] = moves.dims();
    let [_, d] = weight.dims();
    // Each token's row index in every column; materialised, since cubecl's gather reads its
    // indices as a contiguous tensor.
    let rows = moves.reshape([batch * seq, 1]).repeat_dim(1, d);
    weight.gather(0, rows).reshape([batch, seq, d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Param;
    use burn::nn::EmbeddingConfig;

    #[test]
    fn the_variable_names_scatter_or_select() {
        assert_eq!(EmbeddingGrad::default(), EmbeddingGrad::Scatter);
        crate::env_setting::assert_reads_its_names(&EMBEDDING_GRAD, NAMES, &["atomic"]);
    }

    /// Token ids with repeats (the scatter's additions into one row), a table of 11 rows with
    /// the same values on every device, and weights for the loss.
    fn case(device: &Device) -> (Embedding, Tensor<2, Int>, Tensor<3>) {
        let mut embedding = EmbeddingConfig::new(11, 6).init(device);
        let table = Tensor::<1, Int>::arange(0..66, device)
            .float()
            .div_scalar(5.0)
            .cos()
            .reshape([11, 6]);
        embedding.weight = Param::from_tensor(table);
        let moves = Tensor::<2, Int>::from_data([[3, 7, 3, 0], [10, 3, 7, 7]], device);
        let weights = Tensor::<1, Int>::arange(0..48, device)
            .float()
            .div_scalar(7.0)
            .sin()
            .reshape([2, 4, 6]);
        (embedding, moves, weights)
    }

    /// The gathered rows are `select`'s, and their table's gradient `select_assign`'s, on the
    /// CPU where both are burn's `flex` kernels.
    #[test]
    fn gathered_rows_are_the_embeddings_in_value_and_gradient() {
        let device = Device::flex().autodiff();
        let (embedding, moves, weights) = case(&device);
        let run = |by_gather: bool| {
            let out = if by_gather {
                embed_by_gather(embedding.weight.val(), moves.clone())
            } else {
                embedding.forward(moves.clone())
            };
            let grads = (out.clone() * weights.clone()).sum().backward();
            let grad = embedding.weight.val().grad(&grads).expect("tracked");
            (out.inner().into_data(), grad.into_data())
        };
        let (want_out, want_grad) = run(false);
        let (got_out, got_grad) = run(true);
        assert_eq!(got_out, want_out, "the rows");
        got_grad.assert_approx_eq::<f32>(&want_grad, burn::tensor::Tolerance::absolute(1e-6));
        // Row 3 took three tokens' gradients, rows never named none.
        let grad: Vec<f32> = want_grad.try_to_vec::<f32>().unwrap();
        assert!(grad[3 * 6..4 * 6].iter().any(|&g| g != 0.0));
        assert!(grad[6..2 * 6].iter().all(|&g| g == 0.0));
    }

    /// On the CPU, [`embed`] is burn's embedding whatever the setting, and so is a table
    /// without a gradient anywhere.
    #[test]
    fn the_cpu_and_untracked_tables_take_burns_embedding() {
        let (embedding, _, _) = case(&Device::flex().autodiff());
        assert!(!scatters(&embedding.weight.val()));
        let (embedding, moves, _) = case(&Device::flex());
        assert!(!scatters(&embedding.weight.val()));
        assert_eq!(
            embed(&embedding, moves.clone()).into_data(),
            embedding.forward(moves).into_data()
        );
    }

    /// On `cube-cpu`, cubecl's backend with fusion as on a GPU, [`embed`] scatters (the default
    /// setting) and gives the CPU's rows and gradient (`CARGO_TARGET_DIR=target/cube-cpu cargo
    /// test --release -p cwm-models --features cube-cpu --lib embedding_grad`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn on_cube_cpu_the_scatter_is_the_cpus_select_assign() {
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        assert_eq!(EMBEDDING_GRAD.chosen(), Some(EmbeddingGrad::Scatter));
        let on = |device: &Device| {
            let (embedding, moves, weights) = case(device);
            assert_eq!(scatters(&embedding.weight.val()), *device == cube);
            let out = embed(&embedding, moves);
            let grads = (out.clone() * weights).sum().backward();
            let grad = embedding.weight.val().grad(&grads).expect("tracked");
            (out.inner().into_data(), grad.into_data())
        };
        let (want_out, want_grad) = on(&Device::flex().autodiff());
        let (got_out, got_grad) = on(&cube);
        got_out.assert_approx_eq::<f32>(&want_out, burn::tensor::Tolerance::absolute(1e-6));
        got_grad.assert_approx_eq::<f32>(&want_grad, burn::tensor::Tolerance::absolute(1e-5));
    }
}
