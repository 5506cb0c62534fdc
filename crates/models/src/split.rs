//! A tensor cut into side-by-side parts along one dimension, with the backward pass of
//! PyTorch's `split`: the parts' gradients concatenated once.
//!
//! Cut with `narrow`, each part is a slice, and burn's backward pass of a slice builds a zero
//! tensor of the whole sliced shape, writes the part's gradient into it and adds that to the
//! gradient of the whole: for `k` parts, `k` fills, `k` writes and `k − 1` additions, each over
//! the whole tensor. A Mamba-3 layer cuts its input projection into eight parts (at d512 and
//! batch 128 × 256, `[32768, 2384]` floats, 312 MB), a Mamba-2 layer its projection and its
//! convolution's output into three each, and the loss the head's 1,878 columns into five views.
//!
//! [`split`] records one node more: a gathering identity between the whole and the parts.
//! Each part's backward pass leaves its gradient with the gathering node (a list the parts
//! share, not burn's gradient registry), and the gathering node, which burn runs after every
//! part reachable from the loss (it is their only parent, one step shallower), concatenates
//! them once, with zeros only for the parts no gradient reached, and hands that to the whole.
//!
//! A single part from index 0 is a prefix (a chunked scan's output without its padding steps):
//! its gradient goes to the whole as it is when the prefix is all of it, and with zeros for the
//! rest only, not a zero tensor of the whole written into, when it is not. [`windows`] is the
//! same for windows that may overlap (a Hillis–Steele scan's shifted copies of its prefixes):
//! where windows overlap, their gradients are added over that range only.
//!
//! The values are those of the slices' backward passes: each element of the whole's gradient
//! is one part's gradient element, or the sum of the two windows' that cover it (burn added
//! zeros to them, which leaves every value as it was, up to the sign of a zero), so the
//! gradients are equal to the bit (`the_parts_gradients_are_the_slices_to_the_bit`,
//! `overlapping_windows_gradients_are_the_slices_to_the_bit`). With three or more windows over
//! one element the sum's order may differ from burn's, which changes its last bits only.

use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Slice, TensorMetadata, backend_extension};
use burn::prelude::*;

/// `tensor` cut along `dim` into parts of the given `widths`, side by side from index 0 (the
/// module docs). The widths must add up to at most the dimension's size.
///
/// # Shapes
/// - `tensor`: any, with `dim` at least `widths`' sum long
/// - output: `tensor`'s shape with `widths[i]` at `dim`, for each part
pub fn split<const D: usize>(tensor: Tensor<D>, dim: usize, widths: &[usize]) -> Vec<Tensor<D>> {
    windows(tensor, dim, &side_by_side(widths))
}

/// [`split`] into a fixed number of parts, as an array (what destructuring takes).
pub fn split_array<const D: usize, const K: usize>(
    tensor: Tensor<D>,
    dim: usize,
    widths: &[usize; K],
) -> [Tensor<D>; K] {
    split(tensor, dim, widths)
        .try_into()
        .unwrap_or_else(|_| unreachable!("one part per width"))
}

/// `tensor`'s windows `ranges` along `dim`, which may overlap (a scan's shifted copies): the
/// parts of [`split`] in general. The gathering node adds the gradients of windows that
/// overlap, range by range, and concatenates the ranges once.
///
/// # Shapes
/// - `tensor`: any, with every range within `dim`
/// - output: `tensor`'s shape with `ranges[i].len()` at `dim`, for each window
///
/// # Panics
/// Where `dim` is not one of `tensor`'s or a range is not within it, as `narrow` does: the
/// models' cuts are fixed by their configuration.
pub fn windows<const D: usize>(
    tensor: Tensor<D>,
    dim: usize,
    ranges: &[Range<usize>],
) -> Vec<Tensor<D>> {
    let dims = tensor.dims();
    assert!(
        dim < D
            && ranges
                .iter()
                .all(|r| r.start <= r.end && r.end <= dims[dim]),
        "windows {ranges:?} of dimension {dim} of a {dims:?} tensor"
    );
    <Dispatch as SplitOps>::tensor_windows(tensor.into_dispatch(), dim, ranges.to_vec())
        .into_iter()
        .map(Tensor::from_dispatch)
        .collect()
}

/// [`windows`] of a fixed number, as an array.
pub fn windows_array<const D: usize, const K: usize>(
    tensor: Tensor<D>,
    dim: usize,
    ranges: &[Range<usize>; K],
) -> [Tensor<D>; K] {
    windows(tensor, dim, ranges)
        .try_into()
        .unwrap_or_else(|_| unreachable!("one window per range"))
}

/// The ranges that `widths` cut side by side from index 0.
fn side_by_side(widths: &[usize]) -> Vec<Range<usize>> {
    let mut start = 0;
    widths
        .iter()
        .map(|&width| {
            start += width;
            start - width..start
        })
        .collect()
}

/// `t`'s `range` along `dim`, a slice on the backend (no autodiff node of its own).
pub(crate) fn window<B: Backend>(
    t: FloatTensor<B>,
    dim: usize,
    range: &Range<usize>,
) -> FloatTensor<B> {
    let mut slices = vec![Slice::full(); t.shape().num_dims()];
    slices[dim] = Slice::new(range.start as isize, Some(range.end as isize), 1);
    B::float_slice(t, &slices)
}

/// The windows as slices of `tensor`, the forward pass on every backend.
fn cut<B: Backend>(
    tensor: FloatTensor<B>,
    dim: usize,
    ranges: &[Range<usize>],
) -> Vec<FloatTensor<B>> {
    ranges
        .iter()
        .map(|range| window::<B>(tensor.clone(), dim, range))
        .collect()
}

/// The cut as a backend operation: slices on every backend, and a backward pass of one
/// concatenation under autodiff.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait SplitOps: Backend {
    /// [`windows`].
    fn tensor_windows(
        tensor: FloatTensor<Self>,
        dim: usize,
        ranges: Vec<Range<usize>>,
    ) -> Vec<FloatTensor<Self>> {
        cut::<Self>(tensor, dim, &ranges)
    }
}

impl SplitOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl SplitOps for burn::backend::Cube {}

/// Where the parts' backward passes leave their gradients for the gathering node, by part.
type Shelf<B> = Arc<Mutex<Vec<Option<FloatTensor<B>>>>>;

/// The backward pass of one part: its gradient onto the shelf, at its place.
#[derive(Debug)]
struct PartBackward;

impl<B: Backend> Backward<B, 1> for PartBackward {
    type State = (Shelf<B>, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (shelf, index) = ops.state;
        let mut parts = shelf.lock().unwrap_or_else(PoisonError::into_inner);
        parts[index] = Some(grad);
    }
}

/// What the gathering node knows of the whole: the shape, the dimension cut and the windows.
#[derive(Debug, Clone)]
struct Whole {
    shape: Shape,
    dim: usize,
    ranges: Vec<Range<usize>>,
}

/// The backward pass of the gathering node: the whole's gradient from the windows'.
#[derive(Debug)]
struct GatherBackward;

impl<B: Backend> Backward<B, 1> for GatherBackward {
    type State = (Shelf<B>, Whole);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let (shelf, whole) = ops.state;
        let parts = std::mem::take(&mut *shelf.lock().unwrap_or_else(PoisonError::into_inner));
        if let (Some(node), Some(grad)) = (parent, gathered::<B>(parts, &whole)) {
            grads.register::<B>(node.id, grad);
        }
    }
}

/// The whole's gradient from its windows', or `None` where no window has one: along `dim`,
/// range by range between the windows' ends, the sum of the windows' gradients that cover the
/// range (zeros where none does), the ranges concatenated once. Side-by-side parts give one
/// window a range, so the concatenation is of the parts' gradients themselves.
fn gathered<B: Backend>(
    parts: Vec<Option<FloatTensor<B>>>,
    whole: &Whole,
) -> Option<FloatTensor<B>> {
    let present: Vec<(&Range<usize>, FloatTensor<B>)> = whole
        .ranges
        .iter()
        .zip(parts)
        .filter_map(|(range, part)| Some((range, part?)))
        .collect();
    let (device, dtype) = present.first().map(|(_, g)| (g.device(), g.dtype()))?;
    let length = whole.shape[whole.dim];
    let mut ends: Vec<usize> = present
        .iter()
        .flat_map(|(range, _)| [range.start, range.end])
        .chain([0, length])
        .collect();
    ends.sort_unstable();
    ends.dedup();
    let piece = |span: Range<usize>| {
        let covering = present
            .iter()
            .filter(|(range, _)| range.start <= span.start && span.end <= range.end)
            .map(|(range, grad)| {
                if **range == span {
                    return grad.clone();
                }
                let within = span.start - range.start..span.end - range.start;
                window::<B>(grad.clone(), whole.dim, &within)
            });
        covering.reduce(B::float_add).unwrap_or_else(|| {
            let mut shape = whole.shape.clone();
            shape[whole.dim] = span.len();
            B::float_zeros(shape, &device, dtype.into())
        })
    };
    let mut pieces: Vec<FloatTensor<B>> = ends.windows(2).map(|w| piece(w[0]..w[1])).collect();
    Some(match pieces.len() {
        1 => pieces.remove(0),
        _ => B::float_cat(pieces, whole.dim),
    })
}

impl<B: Backend + SplitOps, C: CheckpointStrategy> SplitOps for Autodiff<B, C> {
    fn tensor_windows(
        tensor: FloatTensor<Self>,
        dim: usize,
        ranges: Vec<Range<usize>>,
    ) -> Vec<FloatTensor<Self>> {
        let shelf: Shelf<B> = Arc::new(Mutex::new(vec![None; ranges.len()]));
        let whole = Whole {
            shape: tensor.shape(),
            dim,
            ranges: ranges.clone(),
        };
        let node = tensor.node();
        let gather: FloatTensor<Self> = match GatherBackward
            .prepare::<C>([node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((shelf.clone(), whole), tensor.into_primitive()),
            OpsKind::UnTracked(prep) => prep.finish(tensor.into_primitive()),
        };
        ranges
            .iter()
            .enumerate()
            .map(|(index, range)| {
                let part = window::<B>(gather.primitive().clone(), dim, range);
                match PartBackward
                    .prepare::<C>([gather.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish((shelf.clone(), index), part),
                    OpsKind::UnTracked(prep) => prep.finish(part),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// A loss that uses the parts `used` (weighted, so every element's gradient differs), and
    /// the whole itself too when `whole_too`: the gradient of the whole, with the parts cut by
    /// `cut_by`.
    fn whole_gradient(
        cut_by: &dyn Fn(Tensor<3>) -> Vec<Tensor<3>>,
        x: &Tensor<3>,
        used: &[usize],
        whole_too: bool,
    ) -> (Vec<Vec<f32>>, Vec<f32>) {
        let x = x.clone().detach().require_grad();
        let parts = cut_by(x.clone());
        let forward: Vec<Vec<f32>> = parts.iter().map(|p| values(p.clone().inner())).collect();
        let mut loss = Tensor::<1>::zeros([1], &x.device());
        for &i in used {
            let w =
                Tensor::<3>::random(parts[i].dims(), Distribution::Normal(0.0, 1.0), &x.device());
            loss = loss + (parts[i].clone() * w).sum();
        }
        if whole_too {
            loss = loss + (x.clone() * x.clone()).sum();
        }
        let grads = loss.backward();
        (forward, values(x.grad(&grads).expect("tracked")))
    }

    fn by_narrow(widths: &'static [usize]) -> impl Fn(Tensor<3>) -> Vec<Tensor<3>> {
        move |x: Tensor<3>| {
            let mut start = 0;
            widths
                .iter()
                .map(|&w| {
                    let part = x.clone().narrow(2, start, w);
                    start += w;
                    part
                })
                .collect()
        }
    }

    fn by_split(widths: &'static [usize]) -> impl Fn(Tensor<3>) -> Vec<Tensor<3>> {
        move |x: Tensor<3>| split(x, 2, widths)
    }

    /// The parts and the whole's gradient against the slices', every element to the bit: all
    /// parts used, some (zeros for the others), the whole used beside them, and widths that
    /// leave a tail no part covers.
    #[test]
    fn the_parts_gradients_are_the_slices_to_the_bit() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 17], Distribution::Normal(0.0, 1.0), &device);
        const ALL: &[usize] = &[5, 4, 1, 7];
        const SHORT: &[usize] = &[3, 6];
        for (widths, used, whole_too) in [
            (ALL, &[0, 1, 2, 3][..], false),
            (ALL, &[3, 1][..], false),
            (ALL, &[2][..], true),
            (SHORT, &[0, 1][..], true),
            (SHORT, &[1][..], false),
        ] {
            device.seed(7);
            let want = whole_gradient(&by_narrow(widths), &x, used, whole_too);
            device.seed(7);
            let got = whole_gradient(&by_split(widths), &x, used, whole_too);
            assert_eq!(got.0, want.0, "{widths:?} {used:?}: parts");
            assert_eq!(got.1, want.1, "{widths:?} {used:?}: gradient");
        }
    }

    /// Overlapping windows (a Hillis–Steele level's head, left and right windows, and a
    /// window inside another) against the slices', every element to the bit: where two
    /// windows overlap their gradients are added, as burn's registry adds the slices'.
    #[test]
    fn overlapping_windows_gradients_are_the_slices_to_the_bit() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 8], Distribution::Normal(0.0, 1.0), &device);
        let narrowed = |ranges: Vec<Range<usize>>| {
            move |x: Tensor<3>| -> Vec<Tensor<3>> {
                let part = |r: &Range<usize>| x.clone().narrow(2, r.start, r.len());
                ranges.iter().map(part).collect()
            }
        };
        let windowed = |ranges: Vec<Range<usize>>| {
            move |x: Tensor<3>| -> Vec<Tensor<3>> { windows(x, 2, &ranges) }
        };
        for (ranges, used) in [
            (vec![0..2, 0..6, 2..8], &[0, 1, 2][..]),
            (vec![0..4, 4..8, 0..4], &[1, 2][..]),
            (vec![1..7, 3..5], &[0, 1][..]),
            (vec![1..7, 3..5], &[1][..]),
        ] {
            device.seed(11);
            let want = whole_gradient(&narrowed(ranges.clone()), &x, used, false);
            device.seed(11);
            let got = whole_gradient(&windowed(ranges.clone()), &x, used, false);
            assert_eq!(got.0, want.0, "{ranges:?} {used:?}: windows");
            assert_eq!(got.1, want.1, "{ranges:?} {used:?}: gradient");
        }
    }

    /// Parts of no width (a one-step sequence's previous steps) are empty tensors, with and
    /// without autodiff, and the whole's gradient is the other parts'.
    #[test]
    fn empty_parts_are_empty() {
        let _rng = crate::rng::rng_lock();
        for device in [Device::flex(), Device::flex().autodiff()] {
            let x = Tensor::<3>::random([2, 1, 4], Distribution::Normal(0.0, 1.0), &device);
            let [none, all] = split_array(x.clone(), 1, &[0, 1]);
            assert_eq!(none.dims(), [2, 0, 4]);
            assert_eq!(values(all), values(x));
        }
        // burn's `narrow` refuses a length of 0, so the comparison leaves the empty parts out.
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 8], Distribution::Normal(0.0, 1.0), &device);
        device.seed(5);
        let want = whole_gradient(&by_narrow(&[3, 5]), &x, &[0, 1], false);
        device.seed(5);
        let got = whole_gradient(&by_split(&[0, 3, 0, 5]), &x, &[1, 3], false);
        assert_eq!(got.1, want.1);
    }

    /// A part cut one column off (the second part starting where the first does) is caught.
    #[test]
    fn a_part_cut_in_the_wrong_place_is_caught() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 8], Distribution::Normal(0.0, 1.0), &device);
        let shifted = |x: Tensor<3>| vec![x.clone().narrow(2, 0, 3), x.narrow(2, 2, 5)];
        device.seed(7);
        let want = whole_gradient(&shifted, &x, &[0, 1], false);
        device.seed(7);
        let got = whole_gradient(&by_split(&[3, 5]), &x, &[0, 1], false);
        assert_ne!(got.1, want.1);
    }

    /// Without autodiff, and with an untracked input under autodiff, the parts are the slices.
    #[test]
    fn untracked_parts_are_the_slices() {
        let _rng = crate::rng::rng_lock();
        for device in [Device::flex(), Device::flex().autodiff()] {
            device.seed(3);
            let x = Tensor::<3>::random([2, 2, 9], Distribution::Normal(0.0, 1.0), &device);
            let got: Vec<Vec<f32>> = split(x.clone(), 2, &[4, 5])
                .into_iter()
                .map(values)
                .collect();
            let want: Vec<Vec<f32>> = by_narrow(&[4, 5])(x).into_iter().map(values).collect();
            assert_eq!(got, want);
        }
    }
}
