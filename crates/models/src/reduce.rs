//! The sum of a whole tensor, written so that burn's fusion can fuse it.
//!
//! `Tensor::sum` is a full reduction, which burn 0.22's fusion on cubecl's devices did not fuse
//! in any profile taken: the element-wise operations that feed it ran as a kernel of their own,
//! then the reduction as another. A sum along the one axis of the flattened tensor is a
//! reduction over a dimension, which fusion can fuse with the element-wise operations before it
//! (one launch for `(a · b).sum` where it was two) where its search finds them in one block;
//! where it does not, the count stays as it was. Elsewhere (`flex`) the two forms are the same
//! work. docs/gpu-speed.md has the launches it saves.

use burn::prelude::*;

/// The sum of every element of `tensor`, `[1]`: `0` for an empty tensor.
pub fn sum_all<const D: usize>(tensor: Tensor<D>) -> Tensor<1> {
    let n = tensor.shape().num_elements();
    if n == 0 {
        return tensor.sum();
    }
    tensor.reshape([n]).sum_dim(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_of_every_element_is_the_full_reduction() {
        let device = Device::flex();
        let t = Tensor::<3>::from_data(
            [[[1.0f32, 2.0], [3.0, 4.5]], [[-1.0, 0.25], [8.0, 0.0]]],
            &device,
        );
        let full = t.clone().sum().into_data().try_to_vec::<f32>().unwrap();
        let along = sum_all(t).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(along, full);
        assert_eq!(along, vec![17.75]);
    }

    #[test]
    fn an_empty_tensor_sums_to_zero() {
        let device = Device::flex();
        let t = Tensor::<2>::zeros([0, 3], &device);
        assert_eq!(
            sum_all(t).into_data().try_to_vec::<f32>().unwrap(),
            vec![0.0]
        );
    }
}
