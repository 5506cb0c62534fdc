//! cuBLAS's product on device `cuda` (the parent module's docs): the operands' device memory
//! through cubecl's client, `cublasGemmStridedBatchedEx` in TF32 for `f32` operands and with
//! `f32` accumulation for bf16 ones (Mamba-3's `Linear`s under the reference's autocast,
//! `mixed.rs`), on a stream of its own,
//! ordered against cubecl's kernels by waiting for both queues (`cublas`), or on the GPU by
//! flags in device memory (`cublas-async`, `flags.rs`): cubecl's stream writes a flag the
//! product's stream waits for (`cuStreamWaitValue32`), the product's stream writes one when
//! done (`cuStreamWriteValue32`) that a one-unit kernel on cubecl's stream waits for.
//!
//! With flags, every wait either stream is given depends only on work the GPU has been given
//! already, so that a call that waits for the whole device (CUDA's loading of a kernel at its
//! first launch may, and so does freeing memory) cannot wait on a flag whose writer is still
//! queued on the host: cubecl's kernels are launched by its device thread, so before the
//! products' stream is told to wait for the signal kernel, this thread waits for the device
//! thread to have launched it (an empty task run there, `exclusive`: a wait for the host's
//! queue, not the GPU's); the waiting kernel is queued after the products' stream has been
//! given the calls and the write it waits for. On top of that, a thread's first call of each
//! kind (sizes and transpositions) is still ordered by host waits, and the two flag kernels are
//! run once when the buffer is made, so that no kernel they involve is loaded while anything
//! spins. The flags' "gave up" word is read back after a thread's first, second, fourth, …
//! flagged call and every [`CHECK_EVERY`] calls from the thousandth on ([`check_after`]).
//!
//! The library is loaded at run time (cudarc's dynamic loading): `libcublas.so` from the CUDA
//! toolkit or PyTorch's `nvidia` packages, found through `LD_LIBRARY_PATH` or the loader's
//! cache. [`check_library`] says so before the first step when it is missing.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU16, Ordering};

use burn::backend::ops::FloatTensorOps;
use burn::cubecl::cuda::CudaRuntime;
use burn::cubecl::future::block_on;
use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, CubeDevice};
use cubecl_runtime::runtime::Runtime;
use cudarc::cublas::result as blas;
use cudarc::cublas::sys as blas_sys;
use cudarc::driver::result as driver;
use cudarc::driver::sys as driver_sys;

use super::flags::{self, DONE, GAVE_UP, READY};
use super::{Gemm, cublas_async, cublas_chosen, dims_of, output_shape, product_by_ops};

/// The server behind a CUDA device's client, whose buffers' device addresses cubecl hands out.
type CudaServer = <CudaRuntime as Runtime>::Server;

/// The element types cuBLAS multiplies here, the same for both operands and the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Elem {
    /// `f32` operands and output, multiplied on TF32 tensor cores.
    F32,
    /// bf16 operands and output, the products accumulated in `f32`, as the reference's autocast
    /// multiplies.
    Bf16,
}

impl Elem {
    /// The type of operands of `dtype`, if cuBLAS multiplies them here.
    fn of(dtype: DType) -> Option<Elem> {
        match dtype {
            DType::F32 => Some(Elem::F32),
            DType::BF16 => Some(Elem::Bf16),
            _ => None,
        }
    }

    fn dtype(self) -> DType {
        match self {
            Elem::F32 => DType::F32,
            Elem::Bf16 => DType::BF16,
        }
    }

    /// The matrices' type as cuBLAS names it.
    fn data_type(self) -> blas_sys::cudaDataType {
        match self {
            Elem::F32 => blas_sys::cudaDataType::CUDA_R_32F,
            Elem::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
        }
    }

    /// How cuBLAS computes: `f32` products on TF32 tensor cores (PyTorch's `allow_tf32`, the
    /// reference's), bf16 ones accumulated in `f32`; `alpha` and `beta` are `f32` in both.
    fn compute_type(self) -> blas_sys::cublasComputeType_t {
        match self {
            Elem::F32 => blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            Elem::Bf16 => blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        }
    }

    /// The largest relative difference a checked product may show against burn's: TF32 keeps
    /// 10 bits of the operands' mantissas, about 10⁻³ relative per product term; a bf16 output
    /// is rounded to 8 bits (4 · 10⁻³ relative), by both, and burn's kernel may accumulate in
    /// fewer bits than cuBLAS's `f32`. A wrong call (a transposition, a leading dimension)
    /// differs by the order of the values themselves.
    fn tolerance(self) -> f32 {
        match self {
            Elem::F32 => 1e-2,
            Elem::Bf16 => 5e-2,
        }
    }
}

/// The most loads of the "done" flag a waiting kernel makes before it gives up: about ten
/// seconds of a GPU's global-memory latency, some thousands of times the longest product.
const SPIN_LIMIT: u32 = 1 << 24;

/// How many flagged calls of a thread go by between two reads of the "gave up" word, once
/// this many have been made; before, the word is read after calls 1, 2, 4, 8, …, so that an
/// ordering that does not work on some machine stops the process at its first call rather
/// than costing each call [`SPIN_LIMIT`] loads until the thousandth.
const CHECK_EVERY: u64 = 1024;

/// Whether the "gave up" word is read after the thread's `calls`-th flagged call.
fn check_after(calls: u64) -> bool {
    calls.is_multiple_of(CHECK_EVERY) || (calls < CHECK_EVERY && calls.is_power_of_two())
}

/// Which kinds of call, an element type with a pair of transpositions for one product or a
/// batch (bit `8 · bf16 + 4 · batched + 2 · transpose_a + transpose_b`), had their first cuBLAS
/// product of the process compared with burn's.
static CHECKED: AtomicU16 = AtomicU16::new(0);

/// Whether cuBLAS multiplies `a` and `b`: chosen for the process, both `f32` or both bf16 on a
/// CUDA device, and every size within cuBLAS's 32-bit arguments and not zero.
pub(super) fn applies(
    a: &CubeTensor,
    b: &CubeTensor,
    transpose_a: bool,
    transpose_b: bool,
) -> bool {
    let on_cuda = matches!(a.device, CubeDevice::Cuda(_)) && a.device == b.device;
    let fits = |gemm: Gemm| {
        [gemm.m, gemm.n, gemm.k, gemm.batch]
            .iter()
            .all(|&s| s > 0 && i32::try_from(s).is_ok())
            && i32::try_from(gemm.m * gemm.n).is_ok()
    };
    cublas_chosen()
        && on_cuda
        && Elem::of(a.dtype).is_some()
        && a.dtype == b.dtype
        && Gemm::of(&dims_of(a), &dims_of(b), transpose_a, transpose_b).is_ok_and(fits)
}

/// Whether cuBLAS's library can be loaded, else a message saying where it was looked for.
///
/// # Errors
/// The library is not found under any of the names cudarc tries.
pub(crate) fn check_library() -> Result<(), String> {
    // SAFETY: loading a shared library runs its initialisers; cuBLAS's are NVIDIA's own.
    if unsafe { blas_sys::is_culib_present() } {
        return Ok(());
    }
    let setting = super::PRODUCTS.chosen().unwrap_or(super::Products::Cublas);
    Err(format!(
        "CWM_PRODUCTS={setting}: cuBLAS's library (libcublas.so) is not found (looked for {:?} \
         in LD_LIBRARY_PATH and the loader's cache); add the folder holding it (the CUDA \
         toolkit's lib64, or the `nvidia/cu*/lib` of PyTorch's packages) to LD_LIBRARY_PATH, or \
         leave the products to cubecl",
        cudarc::get_lib_name_candidates("cublas")
    ))
}

/// One product's operands (contiguous), the call (which holds the transpositions), their
/// element type and the output.
struct Job {
    a: CubeTensor,
    b: CubeTensor,
    gemm: Gemm,
    elem: Elem,
    out: CubeTensor,
}

impl Job {
    /// `(transpose_a, transpose_b)`: cuBLAS's first operand is `b`, its second `a`.
    fn transposes(&self) -> (bool, bool) {
        (self.gemm.transpose_second, self.gemm.transpose_first)
    }

    fn describe(&self) -> String {
        let (ta, tb) = self.transposes();
        format!(
            "cuBLAS's {:?} product of {:?} ({ta}) by {:?} ({tb})",
            self.elem,
            dims_of(&self.a),
            dims_of(&self.b)
        )
    }
}

/// `op(a) · op(b)` for each of `operands` (`a`, `b`, `transpose_a`, `transpose_b`; each as
/// [`applies`] allows) by cuBLAS, under one wait for cubecl's queue before them and one for
/// their stream after them (or between flags: the module docs); the process's first product of
/// each kind ([`CHECKED`]) is checked against burn's.
///
/// # Panics
/// cuBLAS or cubecl fails, or a checked product differs from burn's beyond
/// its element type's [`Elem::tolerance`]: a backend operation has no error to return.
pub(super) fn products<const N: usize>(
    operands: [(CubeTensor, CubeTensor, bool, bool); N],
) -> [CubeTensor; N] {
    let jobs = operands.map(|(a, b, ta, tb)| {
        let (a, b) = (into_contiguous(a), into_contiguous(b));
        let (a_dims, b_dims) = (dims_of(&a), dims_of(&b));
        let gemm = Gemm::of(&a_dims, &b_dims, ta, tb)
            .unwrap_or_else(|reason| panic!("cuBLAS's product: {reason}"));
        let elem = Elem::of(a.dtype)
            .unwrap_or_else(|| panic!("cuBLAS's product of {:?} operands", a.dtype));
        let out = empty_device_contiguous_dtype(
            a.client.clone(),
            a.device.clone(),
            // cuBLAS's `m` and `n` are the output's columns and rows (`Gemm`).
            output_shape(&a_dims, gemm.n, gemm.m),
            elem.dtype(),
        );
        Job {
            a,
            b,
            gemm,
            elem,
            out,
        }
    });
    if let Err(reason) = run(&jobs) {
        let all: Vec<String> = jobs.iter().map(Job::describe).collect();
        panic!("{}: {reason}", all.join(", "));
    }
    jobs.map(|job| {
        check_first(&job);
        job.out
    })
}

/// `job`'s output against burn's product of its operands, if it is the process's first of its
/// kind ([`CHECKED`]).
fn check_first(job: &Job) {
    let (ta, tb) = job.transposes();
    let (bf16, batched) = (job.elem == Elem::Bf16, job.gemm.batch > 1);
    let bit = 8 * u16::from(bf16) + 4 * u16::from(batched) + 2 * u16::from(ta) + u16::from(tb);
    let kind = 1u16 << bit;
    if CHECKED.fetch_or(kind, Ordering::Relaxed) & kind != 0 {
        return;
    }
    let want = product_by_ops::<CubeBackend>(job.a.clone(), job.b.clone(), ta, tb);
    if let Err(reason) = compare(job.out.clone(), want, job.elem.tolerance()) {
        panic!("{} differs from burn's: {reason}", job.describe());
    }
}

/// The largest difference between `got` and `want` relative to `want`'s largest magnitude.
///
/// # Errors
/// A read-back fails, or the difference is beyond `tolerance`.
fn compare(got: CubeTensor, want: CubeTensor, tolerance: f32) -> Result<(), String> {
    let read = |t: CubeTensor| -> Result<Vec<f32>, String> {
        let data = block_on(CubeBackend::float_into_data(t)).map_err(|e| format!("{e:?}"))?;
        data.try_into_vec_as::<f32>().map_err(|e| format!("{e:?}"))
    };
    let (got, want) = (read(got)?, read(want)?);
    let scale = want
        .iter()
        .fold(0.0f32, |m, w| m.max(w.abs()))
        .max(f32::MIN_POSITIVE);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs() / scale)
        .fold(
            0.0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    if worst <= tolerance {
        Ok(())
    } else {
        Err(format!(
            "a largest difference of {worst:e} of the largest value (at most {tolerance:e})"
        ))
    }
}

/// The thread's cuBLAS handle, on a stream of its own, for one CUDA device.
struct Blas {
    index: usize,
    context: driver_sys::CUcontext,
    stream: driver_sys::CUstream,
    handle: blas_sys::cublasHandle_t,
    /// The calls made so far under host waits (the module docs).
    seen: HashSet<(Gemm, Elem)>,
    /// The flags of `cublas-async`, made at the first flagged call.
    flags: Option<Flags>,
}

/// A thread's flags buffer (`flags.rs`) and where it lies.
struct Flags {
    words: CubeTensor,
    /// The buffer's device address.
    address: u64,
    /// Keeps the buffer in place (the client's resource for it).
    _held: Box<dyn Any>,
    /// The last epoch queued.
    epoch: u32,
    /// Flagged calls so far.
    calls: u64,
}

impl Flags {
    /// A buffer on `like`'s device, its two kernels run once (loading their modules while
    /// nothing waits on the device) and the words read back.
    fn new(like: &CubeTensor) -> Result<Flags, String> {
        let words = flags::new_flags(like);
        let held = like
            .client
            .get_resource::<CudaServer>(words.handle.clone())
            .map_err(|e| format!("the flags' device address: {e:?}"))?;
        let address = held.resource().ptr;
        flags::signal(&words, 0);
        flags::await_done(&words, 0, SPIN_LIMIT);
        let read = flags::read(&words)?;
        if read != [0; flags::WORDS] {
            return Err(format!(
                "the flags read {read:?} after their first use, not zeros"
            ));
        }
        Ok(Flags {
            words,
            address,
            _held: Box::new(held),
            epoch: 0,
            calls: 0,
        })
    }

    /// The device address of `word`.
    fn at(&self, word: usize) -> u64 {
        self.address + 4 * word as u64
    }

    /// An error if a waiting kernel gave up since the buffer was made.
    fn check(&self) -> Result<(), String> {
        let read = flags::read(&self.words)?;
        match read[GAVE_UP] {
            0 => Ok(()),
            epoch => Err(format!(
                "cubecl's stream stopped waiting for cuBLAS's call {epoch} after {SPIN_LIMIT} \
                 loads of its flag: the product did not finish"
            )),
        }
    }
}

thread_local! {
    /// The handle this thread multiplies with, made at its first product.
    static BLAS: RefCell<Option<Blas>> = const { RefCell::new(None) };
}

impl Blas {
    /// A handle for device `index`, on a new non-blocking stream of the device's
    /// primary context (the one cubecl's CUDA runtime works in).
    fn new(index: usize) -> Result<Blas, String> {
        let ordinal = i32::try_from(index).map_err(|_| format!("device index {index}"))?;
        let device = driver::device::get(ordinal).map_err(|e| format!("cuDeviceGet: {e:?}"))?;
        // SAFETY: `device` is a valid device; the context is retained for the thread's life.
        let context = unsafe { driver::primary_ctx::retain(device) }
            .map_err(|e| format!("cuDevicePrimaryCtxRetain: {e:?}"))?;
        // SAFETY: `context` was just retained.
        unsafe { driver::ctx::set_current(context) }
            .map_err(|e| format!("cuCtxSetCurrent: {e:?}"))?;
        let stream = driver::stream::create(driver::stream::StreamKind::NonBlocking)
            .map_err(|e| format!("cuStreamCreate: {e:?}"))?;
        let handle = blas::create_handle().map_err(|e| format!("cublasCreate: {e:?}"))?;
        let blas = Blas {
            index,
            context,
            stream,
            handle,
            seen: HashSet::new(),
            flags: None,
        };
        // SAFETY: the handle and the stream were just made, in the current context.
        unsafe { blas::set_stream(handle, stream.cast()) }
            .map_err(|e| format!("cublasSetStream: {e:?}"))?;
        Ok(blas)
    }

    /// `gemm` on `b`, `a` and `c`'s device addresses, queued on the handle's stream: one call of
    /// `cublasGemmStridedBatchedEx` (a batch of one for a `Linear`'s product), its types and
    /// computation `elem`'s.
    ///
    /// # Safety
    /// The addresses hold contiguous matrices of `elem` and `gemm`'s sizes (`gemm.batch` of
    /// each, one after the other), on this handle's device, written already and kept alive
    /// until [`Blas::wait`] has returned.
    unsafe fn gemm(&self, gemm: &Gemm, elem: Elem, b: u64, a: u64, c: u64) -> Result<(), String> {
        let op = |transposed| {
            if transposed {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let int = |v: usize| i32::try_from(v).map_err(|_| format!("{v} is beyond cuBLAS's int"));
        let long = |v: usize| i64::try_from(v).map_err(|_| format!("{v} is beyond i64"));
        let (alpha, beta) = (1.0f32, 0.0f32);
        let data = elem.data_type();
        // SAFETY: as the caller promises; the context was retained by `Blas::new` for the
        // thread's life; `alpha` and `beta` (`f32`, as `elem`'s computation wants) live through
        // the call.
        unsafe {
            driver::ctx::set_current(self.context)
                .map_err(|e| format!("cuCtxSetCurrent: {e:?}"))?;
            blas::gemm_strided_batched_ex(
                self.handle,
                op(gemm.transpose_first),
                op(gemm.transpose_second),
                int(gemm.m)?,
                int(gemm.n)?,
                int(gemm.k)?,
                (&raw const alpha).cast(),
                b as *const c_void,
                data,
                int(gemm.ld_first)?,
                long(gemm.stride_first)?,
                a as *const c_void,
                data,
                int(gemm.ld_second)?,
                long(gemm.stride_second)?,
                (&raw const beta).cast(),
                c as *mut c_void,
                data,
                int(gemm.ld_out)?,
                long(gemm.stride_out)?,
                int(gemm.batch)?,
                elem.compute_type(),
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .map_err(|e| format!("cublasGemmStridedBatchedEx ({elem:?}): {e:?}"))
        }
    }

    /// The product's stream waits until the word at `address` has reached `epoch`.
    ///
    /// # Safety
    /// `address` is a word of a live buffer of this handle's device.
    unsafe fn wait_for(&self, address: u64, epoch: u32) -> Result<(), String> {
        let geq = driver_sys::CUstreamWaitValue_flags_enum::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: as the caller promises; the stream is the handle's.
        unsafe { driver_sys::cuStreamWaitValue32_v2(self.stream, address, epoch, geq) }
            .result()
            .map_err(|e| format!("cuStreamWaitValue32: {e:?}"))
    }

    /// The product's stream writes `epoch` to the word at `address` once its earlier work is
    /// done (with a memory barrier: that work's writes are seen by whoever sees the word).
    ///
    /// # Safety
    /// `address` is a word of a live buffer of this handle's device.
    unsafe fn write(&self, address: u64, epoch: u32) -> Result<(), String> {
        let barrier =
            driver_sys::CUstreamWriteValue_flags_enum::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: as the caller promises; the stream is the handle's.
        unsafe { driver_sys::cuStreamWriteValue32_v2(self.stream, address, epoch, barrier) }
            .result()
            .map_err(|e| format!("cuStreamWriteValue32: {e:?}"))
    }

    /// Waits until every product queued on the handle's stream is done.
    fn wait(&self) -> Result<(), String> {
        // SAFETY: the stream was made by `Blas::new` and is destroyed only with the handle.
        unsafe { driver::stream::synchronize(self.stream) }
            .map_err(|e| format!("cuStreamSynchronize: {e:?}"))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // The flags' buffer is left to the process: at a thread's end cubecl's device may be
        // gone already, and twelve bytes are not worth a message to it.
        std::mem::forget(self.flags.take());
        // SAFETY: made by `Blas::new` and used by nothing else; failures (a context already
        // torn down at exit) leave nothing to do.
        unsafe {
            let _ = blas::destroy_handle(self.handle);
            let _ = driver::stream::destroy(self.stream);
        }
    }
}

/// Each job's call on the buffers of its operands and output, ordered by host waits or by
/// flags (the module docs).
fn run(jobs: &[Job]) -> Result<(), String> {
    let Some(first) = jobs.first() else {
        return Ok(());
    };
    let CubeDevice::Cuda(device) = &first.a.device else {
        return Err(format!("{:?} is not a CUDA device", first.a.device));
    };
    if jobs.iter().any(|job| job.a.device != first.a.device) {
        return Err("operands on more than one device".to_string());
    }
    let client = &first.a.client;
    let resource = |t: &CubeTensor| {
        client
            .get_resource::<CudaServer>(t.handle.clone())
            .map_err(|e| format!("the buffer's device address: {e:?}"))
    };
    // Held until the products are queued (flags) or done (waits): a held buffer is neither
    // freed nor moved.
    let mut held = Vec::with_capacity(jobs.len());
    for job in jobs {
        held.push([resource(&job.b)?, resource(&job.a)?, resource(&job.out)?]);
    }
    let addresses: Vec<[u64; 3]> = held
        .iter()
        .map(|buffers| buffers.each_ref().map(|b| b.resource().ptr))
        .collect();
    BLAS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|blas| blas.index != device.index) {
            *slot = Some(Blas::new(device.index)?);
        }
        let blas = slot.as_mut().expect("made above");
        if cublas_async()
            && jobs
                .iter()
                .all(|job| blas.seen.contains(&(job.gemm, job.elem)))
        {
            // SAFETY: the addresses are of `held`'s buffers (as below); the flags order the
            // calls after the operands' writes and cubecl's later kernels after the calls.
            unsafe { blas.run_flagged(jobs, &addresses, &first.a) }
        } else {
            block_on(client.sync()).map_err(|e| format!("waiting for cubecl's kernels: {e:?}"))?;
            // SAFETY: the addresses are of `held`'s buffers, the jobs' (made contiguous, sized by
            // `Gemm::of`, all on `device`); cubecl's queue has drained, so the operands are
            // written; `held` outlives the wait below.
            unsafe { blas.queue(jobs, &addresses)? };
            blas.wait()?;
            blas.seen
                .extend(jobs.iter().map(|job| (job.gemm, job.elem)));
            Ok(())
        }
    })
}

impl Blas {
    /// Each job's call on its `[b, a, out]` addresses, queued on the handle's stream.
    ///
    /// # Safety
    /// The addresses are of `jobs`' buffers, held by the caller: contiguous matrices of their
    /// element types and the calls' sizes (`Gemm::of` on their shapes) on the handle's device
    /// (one device for all jobs: the backward pass's operands). The caller orders the calls
    /// after the operands' writes, and any reuse of the buffers after the calls.
    unsafe fn queue(&self, jobs: &[Job], addresses: &[[u64; 3]]) -> Result<(), String> {
        for (job, &[b, a, out]) in jobs.iter().zip(addresses) {
            // SAFETY: as the caller promises.
            unsafe { self.gemm(&job.gemm, job.elem, b, a, out)? };
        }
        Ok(())
    }

    /// `jobs` between a flag cubecl's stream writes and one it waits for (the module docs):
    /// nothing waits on the host.
    ///
    /// # Safety
    /// As [`Blas::queue`], but for the order: that is this function's to make.
    unsafe fn run_flagged(
        &mut self,
        jobs: &[Job],
        addresses: &[[u64; 3]],
        like: &CubeTensor,
    ) -> Result<(), String> {
        if self.flags.is_none() {
            self.flags = Some(Flags::new(like)?);
        }
        let flags = self.flags.as_mut().expect("made above");
        flags.epoch = flags.epoch.wrapping_add(1);
        flags.calls += 1;
        let (epoch, ready, done) = (flags.epoch, flags.at(READY), flags.at(DONE));
        let check = check_after(flags.calls);
        flags::signal(&flags.words, epoch);
        // The device thread launches what this thread queues; once it has run this empty task
        // it has launched the signal too, so the wait queued below depends only on work the
        // GPU has been given (the module docs).
        flags
            .words
            .client
            .exclusive(|| ())
            .map_err(|e| format!("waiting for cubecl's device thread: {e:?}"))?;
        // SAFETY: `ready` and `done` are words of the flags' buffer, held for the thread's life
        // on this device; the calls run after cubecl's stream has written `ready` (so after the
        // operands' writes, queued before it), and cubecl's stream reads nothing of theirs before
        // it has seen `done`.
        unsafe { self.wait_for(ready, epoch)? };
        // SAFETY: the caller's promise for the addresses; the order as above.
        unsafe { self.queue(jobs, addresses)? };
        // SAFETY: as above.
        unsafe { self.write(done, epoch)? };
        let flags = self.flags.as_ref().expect("made above");
        flags::await_done(&flags.words, epoch, SPIN_LIMIT);
        if check { flags.check() } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "gave up" word is read after calls 1, 2, 4, …, 512, then every 1,024 calls: ten reads
    /// in the first thousand, the first right after the first call (`CARGO_TARGET_DIR=target/cuda
    /// cargo test --release -p cwm-models --features cuda --lib cublas`, a `cuda` build's test).
    #[test]
    fn the_flags_are_read_early_then_every_thousand_calls() {
        let reads: Vec<u64> = (1..=5000).filter(|&c| check_after(c)).collect();
        assert_eq!(
            reads,
            [
                1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096
            ]
        );
    }
}
