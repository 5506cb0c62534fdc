//! The Chess-World-Model benchmark's model families in burn, with the shared output head, the
//! reference loss and the reference metrics.
//!
//! - Every family maps move ids `[batch, seq]` to the 1,878 logits of the 75 state labels at
//!   every step (`Embedding(20482, d)` → family body → `Linear(d → 1878)`), spec A.3.
//! - [`Model`] is the one type callers hold; [`Model::init`] builds any family from a
//!   [`ModelConfig`]. Families plug in as described in `src/model.rs`.
//! - [`state_loss`] is the reference's masked, micro-averaged cross-entropy (spec A.4);
//!   [`correct_counts`] and [`StateMetrics`] give ExactState, Labelwise, Trajectory exactness
//!   and prefix bins (spec A.5).
//! - The reference code wins over the paper where they differ; the paper's variant is an
//!   option where the spec flags one (e.g. [`Rope::Standard`], `mamba3_mimo`).
//!
//! The backend is burn's pure-Rust CPU backend (`flex`), chosen at run time through
//! `burn::prelude::Device`; autodiff is a decorator on the device.
//!
//! ```
//! use burn::prelude::*;
//! use cwm_models::{Family, Model, ModelConfig, Size, StateModel, params};
//!
//! let device = Device::flex();
//! let model = Model::init(&ModelConfig::new(Family::SliceDiag, Size::D128), &device).unwrap();
//! let moves = Tensor::<2, Int>::from_data([[20480, 1310, 5000]], &device);
//! assert_eq!(model.logits(moves).dims(), [1, 3, 1878]);
//! assert_eq!(params(Family::Transformer, Size::D128).unwrap(), 3_128_150);
//! ```
#![deny(missing_docs)]

// `checkpoint` and `interop` stay public: other crates name their items by path
// (`checkpoint::CONFIG_FILE`, `interop::export_checkpoint`, ...).
mod adamw_update;
mod attention;
mod attention_kernel;
mod causal_conv;
pub mod checkpoint;
pub mod column_sums;
mod config;
mod delta_chunks;
pub mod delta_kernels;
mod device;
mod device_loss;
mod dropout;
pub mod embedding_grad;
mod env_setting;
mod error;
mod flex_storage;
mod fused_loss;
pub mod fusion_search;
mod gdn;
mod glu;
mod head;
pub mod hidden;
pub mod interop;
pub mod kernel_cache;
pub mod kernel_profile;
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
mod label_loss;
mod loss;
mod mamba;
mod metrics;
pub mod mixed;
mod model;
pub mod products;
#[cfg(feature = "cuda")]
pub mod ptx;
mod recurrent;
mod reduce;
mod rms_norm;
mod rng;
mod rope;
mod slice;
pub mod slice_scan;
mod split;
mod transformer;

// Exported: what other crates, tests, benches and examples use, and what the signatures and
// docs of those items name.
pub use checkpoint::{load_model, save_model};
pub use config::{
    Family, ModelConfig, Precision, Rope, Scan, Size, TrainingAttention, default_chunk_size,
};
pub use device::device_by_name;
pub use env_setting::ProcessSetting;
pub use error::ModelError;
pub use head::{
    HEAD_OUT, HeadLogits, LABEL_GROUPS, LabelGroup, N_LABELS, PAD_TOKEN, START_TOKEN,
    label_classes, split_head, torch_linear,
};
pub use hidden::{Tap, features_by_layer, features_with_edit, layer_name, logits_with_edit};
pub use loss::{
    LossKernel, StateLoss, state_loss, state_loss_from_features, state_loss_in,
    state_loss_of_logits, state_loss_with_kernel, step_cross_entropy, valid_mask,
};
pub use metrics::{BinCounts, StateMetrics, correct_counts};
pub use model::{Model, StateModel, params, params_of};
pub use reduce::sum_all;
pub use rng::{RngGuard, rng_lock};

// The families' building blocks, which the crate's tests check against hand computations.
pub use adamw_update::{
    AdamWScalars, AdamWUpdate, AdamWUpdated, adamw_update, adamw_update_by_ops,
};
pub use attention::{causal_attention, causal_attention_train, merge_heads, split_heads};
pub use gdn::{DeltaRuleInputs, GatedDeltaNet, delta_rule_chunked, delta_rule_sequential};
pub use glu::{GateHalf, swiglu};
pub use mamba::{Mamba2Mixer, Mamba3Inputs, Mamba3Mixer, Mixer, Pairing, rotate};
pub use recurrent::{
    inverse_softplus, scalar_decay_chunked, scalar_decay_scan, scalar_decay_sequential,
};
pub use rope::{RopeTables, apply_rope, rope_tables};
pub use slice::SliceCell;

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
