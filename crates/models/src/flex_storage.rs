//! What the operations written directly on the `flex` CPU backend's memory (the one-pass AdamW
//! update, dropout) check before they take a tensor's elements as one slice.

use burn::backend::flex::FlexTensor;
use burn::tensor::DType;

/// Whether `t` is `f32`, contiguous from the start of its buffer: its elements are the first
/// `num_elements` of its `f32` storage, in row-major order.
pub(crate) fn whole_f32(t: &FlexTensor) -> bool {
    t.dtype() == DType::F32
        && t.layout().contiguous_offsets() == Some((0, t.layout().num_elements()))
}
