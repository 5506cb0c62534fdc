//! The two kernels that order cuBLAS's products against cubecl's kernels on the GPU itself,
//! for [`Products::CublasAsync`](super::Products::CublasAsync): no host wait, the host queues
//! both sides and goes on.
//!
//! A `[3]` buffer of `u32` words is shared by cubecl's stream and the product's:
//!
//! | word | written by | read by |
//! |---|---|---|
//! | [`READY`] | [`signal_kernel`] on cubecl's stream, after the kernels that wrote the operands | the product's stream (`cuStreamWaitValue32`), before the product |
//! | [`DONE`] | the product's stream (`cuStreamWriteValue32`), after the product | [`await_kernel`] on cubecl's stream, before the kernels that read the output |
//! | [`GAVE_UP`] | [`await_kernel`], when it stopped waiting | the host, at its checks |
//!
//! Each product (or pair, for a backward pass) has its own epoch, one more than the last; a
//! word holds the last epoch written, and "reached" is CUDA's own comparison of a stream
//! wait's `GEQ`, `(value − epoch)` as a signed 32-bit number ≥ 0, so that the count may wrap.
//! [`await_kernel`] spins on atomic loads of [`DONE`] in one unit, at most `limit` of them; if
//! the product has not finished by then it writes its epoch to [`GAVE_UP`] and returns, so
//! that a product that never ends shows as an error at the host's next check rather than as a
//! GPU that never comes back.

use burn::backend::Shape;
use burn::cubecl;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

/// The word the product's stream waits on.
pub(crate) const READY: usize = 0;
/// The word the product's stream writes when done.
pub(crate) const DONE: usize = 1;
/// The word [`await_kernel`] writes when it stopped waiting.
pub(crate) const GAVE_UP: usize = 2;
/// The buffer's length in words.
pub(crate) const WORDS: usize = 3;

/// Whether `value` has reached `epoch`, with CUDA's comparison (the module docs).
#[cube]
fn reached(value: u32, epoch: u32) -> bool {
    i32::cast_from(value - epoch) >= 0
}

/// Writes `epoch` to [`READY`]: everything queued before it on the stream is done.
#[cube(launch, create_dummy_kernel)]
pub(crate) fn signal_kernel(flags: &Tensor<Atomic<u32>>, epoch: u32) {
    if ABSOLUTE_POS == 0 {
        flags[READY].store(epoch);
    }
}

/// Returns once [`DONE`] has reached `epoch`, or after `limit` loads of it, writing `epoch` to
/// [`GAVE_UP`] then.
#[cube(launch, create_dummy_kernel)]
pub(crate) fn await_kernel(flags: &Tensor<Atomic<u32>>, epoch: u32, limit: u32) {
    if ABSOLUTE_POS == 0 {
        let mut loads = 0u32;
        loop {
            if reached(flags[DONE].load(), epoch) {
                break;
            }
            loads += 1;
            if loads >= limit {
                flags[GAVE_UP].store(epoch);
                break;
            }
        }
    }
}

/// A new buffer of [`WORDS`] words, all zero, on `like`'s device.
pub(crate) fn new_flags(like: &CubeTensor) -> CubeTensor {
    let zeros = like.client.create_from_slice(&[0u8; 4 * WORDS]);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::new([WORDS]),
        zeros,
        DType::U32,
    )
}

/// Queues [`signal_kernel`] for `epoch` on cubecl's stream.
pub(crate) fn signal(flags: &CubeTensor, epoch: u32) {
    signal_kernel::launch(
        &flags.client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(1),
        flags.clone().into_tensor_arg(),
        epoch,
    );
}

/// Queues [`await_kernel`] for `epoch` on cubecl's stream.
pub(crate) fn await_done(flags: &CubeTensor, epoch: u32, limit: u32) {
    await_kernel::launch(
        &flags.client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(1),
        flags.clone().into_tensor_arg(),
        epoch,
        limit,
    );
}

/// The buffer's words, read back (waiting for cubecl's queue).
///
/// # Errors
/// The read fails.
pub(crate) fn read(flags: &CubeTensor) -> Result<[u32; WORDS], String> {
    use burn::backend::ops::IntTensorOps;
    let data = burn::cubecl::future::block_on(CubeBackend::int_into_data(flags.clone()))
        .map_err(|e| format!("reading the products' flags: {e:?}"))?;
    let words = data
        .convert::<u32>()
        .try_into_vec::<u32>()
        .map_err(|e| format!("reading the products' flags: {e:?}"))?;
    words
        .try_into()
        .map_err(|w: Vec<u32>| format!("the products' flags: {} words", w.len()))
}

#[cfg(all(test, feature = "cube-cpu"))]
mod tests {
    use burn::backend::ops::FloatTensorOps;
    use burn::cubecl::cpu::compute::server::CpuServer;
    use burn::tensor::FloatDType;
    use burn_cubecl::CubeDevice;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;

    use super::*;

    fn flags_on_cpu() -> CubeTensor {
        crate::device_by_name("cube-cpu").expect("cube-cpu");
        let device = CubeDevice::Cpu(Default::default());
        new_flags(&CubeBackend::float_zeros(
            Shape::new([1]),
            &device,
            FloatDType::F32,
        ))
    }

    #[test]
    fn a_signal_writes_its_epoch_to_the_ready_word() {
        let flags = flags_on_cpu();
        signal(&flags, 7);
        assert_eq!(read(&flags).expect("read"), [7, 0, 0]);
        signal(&flags, 8);
        assert_eq!(read(&flags).expect("read"), [8, 0, 0]);
    }

    #[test]
    fn an_await_returns_at_once_for_a_reached_epoch_and_gives_up_on_a_missing_one() {
        let flags = flags_on_cpu();
        // DONE is 0: epoch 0 is reached (and so is any epoch "before" it, past a wrap).
        await_done(&flags, 0, 1 << 30);
        await_done(&flags, u32::MAX, 1 << 30);
        assert_eq!(read(&flags).expect("read"), [0, 0, 0], "neither gave up");
        // Epoch 5 never comes: the wait stops after its 1,000 loads and says so.
        await_done(&flags, 5, 1000);
        assert_eq!(read(&flags).expect("read"), [0, 0, 5]);
    }

    #[test]
    fn a_fresh_output_buffer_is_handed_out_by_the_client() {
        // cuBLAS writes a buffer cubecl allocated but never wrote: the client's claim check
        // must let it through (the CUDA server runs the same check).
        let flags = flags_on_cpu();
        let out = empty_device_contiguous_dtype(
            flags.client.clone(),
            flags.device.clone(),
            Shape::new([16]),
            DType::F32,
        );
        let resource = flags.client.get_resource::<CpuServer>(out.handle.clone());
        assert!(resource.is_ok(), "{:?}", resource.err());
    }
}
