//! cwm's own GPU kernels compiled for an NVIDIA GPU on a machine without one.
//!
//! The `cuda` build compiles a kernel when it is first launched, through cubecl's LLVM backend
//! (NVPTX), so a kernel that does not compile for CUDA would otherwise first fail on a GPU
//! machine, which is lent rarely. [`compile`] runs that same compiler here: each kernel is
//! defined as a launch defines it ([`Kernel`]: the macro's `create_dummy_kernel`, with tensors
//! of a training step's shapes), against the device properties the CUDA runtime reads from a
//! GPU of compute capability `sm` ([`nvidia_properties`]), and lowered to the PTX the runtime
//! would hand the driver. NVIDIA's assembler (`ptxas -v`, `tests` below) then turns the PTX
//! into machine code and reports each kernel's registers, spills and shared memory: how many
//! cubes an SM can hold, known without a GPU.

use std::sync::Arc;

use burn::cubecl::cuda::compiler::CudaBackend;
use burn::cubecl::cuda::{CudaCompilationOptions, CudaCompiler, CudaRepresentation, CudaRuntime};
use burn::cubecl::ir::features::Plane;
use burn::cubecl::ir::nvidia::SmArch;
use burn::cubecl::ir::{
    DeviceIdentity, DeviceProperties, HardwareProperties, MemoryDeviceProperties, OpaqueType,
    TargetProperties, VectorSize,
};
use burn::cubecl::prelude::*;
use burn::cubecl::profile::TimingMethod;
use burn::cubecl::server::Handle;
use burn::cubecl::zspace::Tiling;
use burn::cubecl::{CompilationError, Compiler, CubeKernel};
use cubecl_common::device::{DeviceId, ServiceId};
use cubecl_environment::stream::StreamId;
use cubecl_llvm::nvptx::ptx_version::PtxVersion;
use cubecl_llvm::shared::lowered_features::{GpuTarget, restrict_features};

use crate::attention_kernel::cube::{BLOCK, UNITS, dkdv_kernel, dq_kernel, forward_kernel};
use crate::{adamw_update, dropout, label_loss};

/// The CUDA release whose PTX version the compiler targets: the driver of the GPU machines
/// lent so far (580.159.04) is CUDA 13.0's, which `cuDriverGetVersion` reports as 13000.
pub const DRIVER_VERSION: i32 = 13000;

/// One kernel as a launch defines it, and the PTX the CUDA runtime would load for it.
#[derive(Debug, Clone)]
pub struct Ptx {
    /// The kernel and the case it was defined for, e.g. `attention_forward (dropout)`.
    pub name: String,
    /// The entry point's symbol in `ptx`.
    pub entrypoint: String,
    /// The PTX assembly.
    pub ptx: String,
    /// Shared memory the launch reserves, in bytes.
    pub shared_memory: usize,
    /// The cube's units along x, y and z, as the launch asks for them.
    pub cube_dim: (u32, u32, u32),
}

/// The device properties cubecl's CUDA runtime builds for a GPU of compute capability `sm`
/// (90 for an H100 or H200), as far as they shape kernels like cwm's: the types, the plane
/// (warp) operations and barriers, the hardware limits of a Hopper GPU, narrowed as the
/// runtime narrows them for its LLVM backend. Matrix instructions, atomics and the tensor
/// memory accelerator, which cwm's kernels do not use, are left out.
pub fn nvidia_properties(sm: u32) -> DeviceProperties {
    let memory = MemoryDeviceProperties::new(1 << 34, 512);
    let hardware = HardwareProperties {
        load_width: 128,
        vector_register_count: None,
        plane_size_min: 32,
        plane_size_max: 32,
        max_bindings: 1024,
        max_shared_memory_size: 232_448,
        max_cube_count: (i32::MAX as u32, 65_535, 65_535),
        max_units_per_cube: 1024,
        max_cube_dim: (1024, 1024, 64),
        num_streaming_multiprocessors: Some(132),
        num_tensor_cores: Some(4),
        min_tensor_cores_dim: Some(8),
        num_cpu_cores: None,
        last_level_cache_size: None,
        max_vector_size: VectorSize::MAX,
        cube_mma_reserved_shared_memory: 0,
    };
    let identity = DeviceIdentity {
        name: format!("sm_{sm} (no device: cwm's PTX check)"),
        fingerprint: format!("ptx_sm{sm}"),
        physical: None,
    };
    let mut props = DeviceProperties::new(
        Default::default(),
        memory,
        hardware,
        TimingMethod::Device,
        identity,
    );
    cubecl_cpp::register_supported_types(&mut props);
    props.register_opaque_type(OpaqueType::Barrier);
    props.features.plane.insert(Plane::Sync);
    props.features.plane.insert(Plane::Ops);
    props.features.plane.insert(Plane::NonUniformControlFlow);
    props.features.memory_reinterpret = true;
    props.features.alignment = true;
    props.features.device_memory_scope = true;
    restrict_features(&mut props, GpuTarget::Nvptx);
    props
}

/// The compiler options the runtime sets for `sm` and a driver of CUDA [`DRIVER_VERSION`].
fn options(sm: u32) -> CudaCompilationOptions {
    let mut options = CudaCompilationOptions {
        arch: Some(SmArch::new(sm, true)),
        ptx_version: PtxVersion::for_driver(DRIVER_VERSION),
        ..Default::default()
    };
    options.cpp.warp_size = 32;
    options.cpp.supports_features.grid_constants = true;
    options
}

/// A kernel's definition, whatever its type.
pub type Kernel = Box<dyn CubeKernel>;

/// An `f32` or `u32` tensor argument of `shape`, contiguous, in memory no device holds: a
/// launch's registration reads only its shape, strides and size.
fn tensor(shape: &[usize]) -> TensorArg {
    let strides: Vec<usize> = (0..shape.len())
        .map(|d| shape[d + 1..].iter().product())
        .collect();
    let size = (shape.iter().product::<usize>() * 4) as u64;
    let service = ServiceId::of::<Ptx>(DeviceId::new(0, 0));
    let handle = Handle::new(service, StreamId { value: 0 }, size);
    let binding = TensorBinding {
        handle: handle.binding(),
        strides: strides.into(),
        shape: shape.into(),
        tiling: Tiling::UNTILED,
    };
    TensorArg::Handle { handle: binding }
}

/// Every kernel cwm writes itself, defined for `props` at a d512 transformer's training
/// shapes (batch 128 × 256 tokens, 8 heads of 64 columns), in each case its launches take:
/// attention with and without dropout, dropout, the optimizer's update, the short convolution
/// (at Gated DeltaNet's shapes), the RMSNorm's three kernels, Gated DeltaNet's passage from
/// chunk to chunk, both ways, SLiCE's recurrence both ways for blocks of 1 and 8, the device
/// loss's kernel, and the two flag kernels of cuBLAS's products.
pub fn kernels(props: &DeviceProperties) -> Vec<(String, Kernel)> {
    let props = Arc::new(props.clone());
    // The runtime's own target properties (its matrix registers' layout); cubecl exports the
    // `Runtime` trait that gives them only under the name its macros use.
    let target = Arc::new(<CudaRuntime as burn::cubecl::__private::Runtime>::target_properties());
    let mut out: Vec<(String, Kernel)> = Vec::new();
    for dropout in [true, false] {
        let case = if dropout { "dropout" } else { "no dropout" };
        for (name, kernel) in attention(&props, &target, dropout) {
            out.push((format!("{name} ({case})"), kernel));
        }
    }
    out.push(("dropout".into(), dropout_kernel(&props, &target)));
    out.push(("adamw_update".into(), adamw_kernel(&props, &target)));
    out.push(("label_loss".into(), label_loss_kernel(&props, &target)));
    for (name, kernel) in convolution(&props, &target) {
        out.push((name.into(), kernel));
    }
    for (name, kernel) in norm(&props, &target) {
        out.push((name.into(), kernel));
    }
    for (name, kernel) in delta_chunks(&props, &target) {
        out.push((name.into(), kernel));
    }
    for (name, kernel) in slice_scan(&props, &target) {
        out.push((name, kernel));
    }
    for (name, kernel) in product_flags(&props, &target) {
        out.push((name.into(), kernel));
    }
    out
}

const BATCH: usize = 128;
const HEADS: usize = 8;
const SEQ: usize = 256;
const HEAD_DIM: usize = 64;

/// The attention's three kernels, as `attention_kernel::cube` launches them.
fn attention(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
    dropout: bool,
) -> Vec<(&'static str, Kernel)> {
    let shape = [BATCH, HEADS, SEQ, HEAD_DIM];
    let head = || tensor(&shape);
    let rows = || tensor(&[BATCH, HEADS, SEQ]);
    let parts = || tensor(&[3]);
    let count = || CubeCount::Static((BATCH * HEADS) as u32, SEQ.div_ceil(BLOCK) as u32, 1);
    let dim = CubeDim::new_1d(UNITS as u32);
    let int = ElemType::UInt(burn::cubecl::ir::UIntKind::U32);
    let (scale, threshold, keep_scale) = (0.125f32, 3_865_470_566u64, 1.0f32 / 0.9);
    vec![
        (
            "attention_forward",
            Box::new(forward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count(),
                dim,
                head(),
                head(),
                head(),
                parts(),
                head(),
                rows(),
                scale,
                threshold,
                keep_scale,
                HEAD_DIM,
                BLOCK,
                dropout,
                int,
            )),
        ),
        (
            "attention_dq",
            Box::new(dq_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count(),
                dim,
                head(),
                head(),
                head(),
                head(),
                rows(),
                rows(),
                parts(),
                head(),
                scale,
                threshold,
                keep_scale,
                HEAD_DIM,
                BLOCK,
                dropout,
                int,
            )),
        ),
        (
            "attention_dkdv",
            Box::new(dkdv_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count(),
                dim,
                head(),
                head(),
                head(),
                head(),
                rows(),
                rows(),
                parts(),
                head(),
                head(),
                scale,
                threshold,
                keep_scale,
                HEAD_DIM,
                BLOCK,
                dropout,
                int,
            )),
        ),
    ]
}

/// Elements of the element-wise kernels' tensors: one `[batch, seq, d]` activation at d512.
const ELEMENTS: usize = BATCH * SEQ * 512;

/// The element-wise launches' cube: 256 units, as `CubeDim::new` picks for a large tensor.
fn elementwise() -> (CubeCount, CubeDim) {
    elementwise_over(ELEMENTS)
}

/// A launch of a unit per element over `units` elements, in cubes of 256 units.
fn elementwise_over(units: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(256);
    (CubeCount::Static(units.div_ceil(256) as u32, 1, 1), dim)
}

fn dropout_kernel(props: &Arc<DeviceProperties>, target: &Arc<TargetProperties>) -> Kernel {
    let (count, dim) = elementwise();
    Box::new(dropout::cube::dropout_kernel::create_dummy_kernel(
        props.clone(),
        target.clone(),
        count,
        dim,
        tensor(&[ELEMENTS]),
        tensor(&[3]),
        tensor(&[ELEMENTS]),
        3_865_470_566u64,
        1.0f32 / 0.9,
        ElemType::UInt(burn::cubecl::ir::UIntKind::U32),
    ))
}

fn adamw_kernel(props: &Arc<DeviceProperties>, target: &Arc<TargetProperties>) -> Kernel {
    let (count, dim) = elementwise();
    let t = || tensor(&[ELEMENTS]);
    Box::new(adamw_update::cube::adamw_kernel::create_dummy_kernel(
        props.clone(),
        target.clone(),
        count,
        dim,
        t(),
        t(),
        t(),
        t(),
        tensor(&[1]),
        tensor(&[1]),
        0.99,
        0.1,
        0.95,
        0.05,
        0.5,
        1e-8,
        3e-4,
    ))
}

/// The device loss's kernel at the paper's batch: a unit per step and label of `[batch ·
/// seq, 1878]` logits.
fn label_loss_kernel(props: &Arc<DeviceProperties>, target: &Arc<TargetProperties>) -> Kernel {
    let steps = BATCH * SEQ;
    let (count, dim) = elementwise_over(steps * crate::head::N_LABELS);
    let logits = || tensor(&[steps, crate::head::HEAD_OUT]);
    let labels = || tensor(&[steps, crate::head::N_LABELS]);
    Box::new(label_loss::cube::label_loss_kernel::create_dummy_kernel(
        props.clone(),
        target.clone(),
        count,
        dim,
        logits(),
        labels(),
        tensor(&[steps, 1]),
        tensor(&[crate::head::N_LABELS, 2]),
        labels(),
        logits(),
        // The targets' integer type as burn's cubecl backends keep an `Int` tensor.
        ElemType::Int(burn::cubecl::ir::IntKind::I32),
    ))
}

/// The short convolution's three launches, as `causal_conv::cube` makes them on a
/// `[batch, seq, 512]` input with 4 taps (Gated DeltaNet's at d512): the taps' sums for the
/// output and for the input's gradient, and the weight's gradient.
fn convolution(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
) -> Vec<(&'static str, Kernel)> {
    use crate::causal_conv::cube::{ROWS, taps_kernel, weight_grad_kernel};
    const CHANNELS: usize = 512;
    const TAPS: usize = 4;
    let x = || tensor(&[BATCH, SEQ, CHANNELS]);
    let weight = || tensor(&[CHANNELS, 1, TAPS]);
    let (count, dim) = elementwise();
    let blocks = (BATCH * SEQ).div_ceil(ROWS);
    let (partial_count, _) = elementwise_over(blocks * CHANNELS);
    vec![
        (
            "causal_conv_forward",
            Box::new(taps_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count.clone(),
                dim,
                x(),
                weight(),
                x(),
                TAPS,
                false,
            )),
        ),
        (
            "causal_conv_dx",
            Box::new(taps_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count,
                dim,
                x(),
                weight(),
                x(),
                TAPS,
                true,
            )),
        ),
        (
            "causal_conv_dw",
            Box::new(weight_grad_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                partial_count,
                dim,
                x(),
                x(),
                tensor(&[blocks, CHANNELS, TAPS]),
                ROWS,
                TAPS,
            )),
        ),
    ]
}

/// The RMSNorm's three launches, as `rms_norm::cube` makes them on a GPU (32 units to a row,
/// eight rows a cube) for a `[batch · seq, 512]` input: the forward pass, the backward pass's
/// rows (`dx` and each row's root) and `γ`'s gradient by blocks of rows.
fn norm(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
) -> Vec<(&'static str, Kernel)> {
    use crate::rms_norm::cube::{
        GAMMA_ROWS, SHARED_ROWS, backward_rows_kernel, forward_kernel, gamma_grad_kernel, row_grid,
    };
    const ROWS: usize = BATCH * SEQ;
    const WIDTH: usize = 512;
    let x = || tensor(&[ROWS, WIDTH]);
    let gamma = || tensor(&[WIDTH]);
    let roots = || tensor(&[ROWS]);
    let layout = SHARED_ROWS;
    let (rows_count, rows_dim) = row_grid(ROWS, layout);
    let blocks = ROWS.div_ceil(GAMMA_ROWS);
    let (gamma_count, gamma_dim) = elementwise_over(blocks * WIDTH);
    let eps = 1e-5f32;
    vec![
        (
            "rms_norm_forward",
            Box::new(forward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                rows_count.clone(),
                rows_dim,
                x(),
                gamma(),
                x(),
                eps,
                layout.lanes,
                layout.rows_per_cube,
            )),
        ),
        (
            "rms_norm_backward_rows",
            Box::new(backward_rows_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                rows_count,
                rows_dim,
                x(),
                gamma(),
                x(),
                x(),
                roots(),
                eps,
                layout.lanes,
                layout.rows_per_cube,
            )),
        ),
        (
            "rms_norm_gamma_grad",
            Box::new(gamma_grad_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                gamma_count,
                gamma_dim,
                x(),
                x(),
                roots(),
                tensor(&[blocks, WIDTH]),
                GAMMA_ROWS,
            )),
        ),
    ]
}

/// Gated DeltaNet's passage from chunk to chunk, as `delta_chunks::cube` launches it at d512
/// (8 heads, keys of 48 and values of 96 columns) in chunks of 64 steps: forward and backward,
/// a unit per batch row, head and value column.
fn delta_chunks(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
) -> Vec<(&'static str, Kernel)> {
    use crate::delta_chunks::cube::{backward_kernel, forward_kernel};
    use crate::gdn::{KEY_HEAD_DIM, VALUE_HEAD_DIM};
    const CHUNK: usize = 64;
    let chunks = SEQ / CHUNK;
    let t = |rows: usize, cols: usize| tensor(&[BATCH, chunks, HEADS, rows, cols]);
    let values = || t(CHUNK, VALUE_HEAD_DIM);
    let keys = || t(CHUNK, KEY_HEAD_DIM);
    let states = || t(KEY_HEAD_DIM, VALUE_HEAD_DIM);
    let (count, dim) = elementwise_over(BATCH * HEADS * VALUE_HEAD_DIM);
    vec![
        (
            "delta_chunks_forward",
            Box::new(forward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count.clone(),
                dim,
                values(),
                keys(),
                keys(),
                t(CHUNK, CHUNK),
                keys(),
                t(1, 1),
                values(),
                states(),
                values(),
                KEY_HEAD_DIM,
            )),
        ),
        (
            "delta_chunks_backward",
            Box::new(backward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count,
                dim,
                values(),
                keys(),
                keys(),
                t(CHUNK, CHUNK),
                keys(),
                t(1, 1),
                values(),
                states(),
                KEY_HEAD_DIM,
            )),
        ),
    ]
}

/// SLiCE's recurrence both ways, as `slice_scan::cube` launches it at d512 for diagonal SLiCE
/// (blocks of 1: a unit per channel of each sequence) and SLiCE (blocks of 8: a unit per block).
fn slice_scan(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
) -> Vec<(String, Kernel)> {
    use crate::slice_scan::cube::{backward_kernel, forward_kernel};
    const D: usize = 512;
    let mut out: Vec<(String, Kernel)> = Vec::new();
    for block in [1, 8] {
        let (count, dim) = elementwise_over(BATCH * D / block);
        let a = || tensor(&[BATCH, SEQ, D * block]);
        let x = || tensor(&[BATCH, SEQ, D]);
        let start = || tensor(&[BATCH, D]);
        out.push((
            format!("slice_scan_forward (block {block})"),
            Box::new(forward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count.clone(),
                dim,
                a(),
                x(),
                start(),
                x(),
                block,
            )),
        ));
        out.push((
            format!("slice_scan_backward (block {block})"),
            Box::new(backward_kernel::create_dummy_kernel(
                props.clone(),
                target.clone(),
                count,
                dim,
                a(),
                start(),
                x(),
                x(),
                a(),
                x(),
                start(),
                block,
            )),
        ));
    }
    out
}

/// The two one-unit kernels that order cuBLAS's products on the GPU (`products/flags.rs`).
fn product_flags(
    props: &Arc<DeviceProperties>,
    target: &Arc<TargetProperties>,
) -> [(&'static str, Kernel); 2] {
    use crate::products::flags::{WORDS, await_kernel, signal_kernel};
    let one = || (CubeCount::Static(1, 1, 1), CubeDim::new_1d(1));
    let (count, dim) = one();
    let signal: Kernel = Box::new(signal_kernel::create_dummy_kernel(
        props.clone(),
        target.clone(),
        count,
        dim,
        tensor(&[WORDS]),
        7u32,
    ));
    let (count, dim) = one();
    let wait: Kernel = Box::new(await_kernel::create_dummy_kernel(
        props.clone(),
        target.clone(),
        count,
        dim,
        tensor(&[WORDS]),
        7u32,
        1u32 << 24,
    ));
    [("product_signal", signal), ("product_await", wait)]
}

/// `kernel` compiled by the CUDA runtime's compiler for `sm`.
///
/// # Errors
/// The compiler's own error: a kernel the CUDA build would fail to compile at its launch.
pub fn compile(name: &str, kernel: &dyn CubeKernel, sm: u32) -> Result<Ptx, CompilationError> {
    // The backend the `cuda` build runs (`CudaBackend::default()` without cubecl's `cpp`).
    let mut compiler = CudaCompiler::new(CudaBackend::Llvm);
    let definition = kernel.define();
    let dim = definition.settings.cube_dim;
    let CudaRepresentation::Llvm(module) = compiler.compile(definition, &options(sm))? else {
        unreachable!("the LLVM backend gives LLVM's artifact")
    };
    let bytes: Vec<u8> = module.ptx.iter().map(|&c| c as u8).collect();
    Ok(Ptx {
        name: name.to_string(),
        entrypoint: module.entrypoint,
        ptx: String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_string(),
        shared_memory: module.shared_memory_size,
        cube_dim: (dim.x, dim.y, dim.z),
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::*;

    /// NVIDIA's assembler: `$PTXAS`, else `$CUDA_PATH/bin/ptxas`, else `ptxas` on the path. The
    /// CUDA 13.0 one is on PyPI (`nvidia-cuda-nvcc==13.0.88`, docs/gpu.md), with the libdevice
    /// the compiler links the kernels' `exp` and `ln` from (`$CUDA_PATH/nvvm/libdevice`).
    fn ptxas() -> PathBuf {
        if let Some(path) = std::env::var_os("PTXAS") {
            return path.into();
        }
        match std::env::var_os("CUDA_PATH") {
            Some(root) => Path::new(&root).join("bin").join("ptxas"),
            None => "ptxas".into(),
        }
    }

    /// What `ptxas -v` says of one kernel.
    #[derive(Debug, Default)]
    struct Usage {
        registers: u32,
        spill_stores: u32,
        spill_loads: u32,
        stack_frame: u32,
        shared: u32,
    }

    /// The number before `unit` in `line` (`"40 registers"`, `"0 bytes spill stores"`).
    fn figure(line: &str, unit: &str) -> Option<u32> {
        let before = &line[..line.find(unit)?];
        before.split_whitespace().last()?.parse().ok()
    }

    fn usage(log: &str) -> Usage {
        let mut usage = Usage::default();
        for line in log.lines() {
            if let Some(n) = figure(line, "registers") {
                usage.registers = n;
                usage.shared = figure(line, "bytes smem").unwrap_or(0);
            }
            if let Some(n) = figure(line, "bytes spill stores") {
                usage.spill_stores = n;
                usage.spill_loads = figure(line, "bytes spill loads").unwrap_or(0);
                usage.stack_frame = figure(line, "bytes stack frame").unwrap_or(0);
            }
        }
        usage
    }

    /// `ptx` assembled for `sm_{sm}a`, as the driver would for the GPU, with its usage.
    fn assemble(ptx: &Ptx, dir: &Path, sm: u32) -> Usage {
        let file = dir.join(format!("{}.ptx", ptx.entrypoint));
        std::fs::write(&file, &ptx.ptx).unwrap();
        let output = Command::new(ptxas())
            .arg(format!("-arch=sm_{sm}a"))
            .arg("-v")
            .arg(&file)
            .arg("-o")
            .arg(file.with_extension("cubin"))
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; set CUDA_PATH or PTXAS (module docs)",
                    ptxas().display()
                )
            });
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}: ptxas refused {}:\n{log}",
            ptx.name,
            file.display()
        );
        usage(&log)
    }

    /// The kernel that waits for cuBLAS's products (`products/flags.rs`) loads the "done" word
    /// (4 bytes into the flags) with an atomic load of the GPU's scope inside its loop: a plain
    /// load the compiler could take out of the loop, and the kernel would never see the word
    /// change.
    fn assert_spins_on_a_load_it_cannot_hoist(ptx: &Ptx) {
        let lines: Vec<&str> = ptx.ptx.lines().map(str::trim).collect();
        let label = lines
            .iter()
            .position(|l| l.starts_with("$L__") && l.ends_with(':'))
            .unwrap_or_else(|| panic!("{}: no loop label in\n{}", ptx.name, ptx.ptx));
        let in_loop = &lines[label..];
        assert!(
            in_loop
                .iter()
                .any(|l| l.starts_with("ld.relaxed.gpu.global.") && l.ends_with("+4];")),
            "{}: no relaxed load of the done word in its loop:\n{}",
            ptx.name,
            ptx.ptx
        );
        let name = lines[label].trim_end_matches(':');
        assert!(
            in_loop
                .iter()
                .any(|l| l.contains("bra") && l.ends_with(&format!("{name};"))),
            "{}: the loop never branches back to {name}:\n{}",
            ptx.name,
            ptx.ptx
        );
    }

    /// Registers an SM of compute capability 9.0 has, all its resident cubes together.
    const REGISTERS_PER_SM: u32 = 65_536;

    /// The first of the GPU's launch limits that a cube of `ptx`'s shape, with `usage`'s
    /// registers and shared memory, breaks (the driver would refuse the launch), if one.
    fn over_limit(ptx: &Ptx, usage: &Usage, props: &DeviceProperties) -> Option<String> {
        let hardware = &props.hardware;
        let (x, y, z) = ptx.cube_dim;
        let units = x * y * z;
        let (max_x, max_y, max_z) = hardware.max_cube_dim;
        let shared = ptx.shared_memory.max(usage.shared as usize);
        if units > hardware.max_units_per_cube {
            Some(format!(
                "{units} units, over {}",
                hardware.max_units_per_cube
            ))
        } else if x > max_x || y > max_y || z > max_z {
            Some(format!(
                "a cube of {x} × {y} × {z}, over {max_x} × {max_y} × {max_z}"
            ))
        } else if shared > hardware.max_shared_memory_size {
            Some(format!(
                "{shared} bytes of shared memory, over {}",
                hardware.max_shared_memory_size
            ))
        } else if usage.registers * units > REGISTERS_PER_SM {
            Some(format!(
                "{} registers × {units} units, over an SM's {REGISTERS_PER_SM}",
                usage.registers
            ))
        } else {
            None
        }
    }

    #[test]
    fn launch_limits_are_those_of_sm_90() {
        let props = nvidia_properties(90);
        let ptx = |cube_dim, shared_memory| Ptx {
            name: "k".into(),
            entrypoint: "k".into(),
            ptx: String::new(),
            shared_memory,
            cube_dim,
        };
        let usage = |registers, shared| Usage {
            registers,
            shared,
            ..Usage::default()
        };
        assert_eq!(
            over_limit(&ptx((256, 1, 1), 1024), &usage(32, 0), &props),
            None
        );
        assert_eq!(
            over_limit(&ptx((1024, 1, 1), 0), &usage(64, 0), &props),
            None
        );
        let refused = [
            (ptx((32, 64, 1), 0), usage(16, 0), "2048 units, over 1024"),
            (ptx((1, 1, 128), 0), usage(16, 0), "a cube of 1 × 1 × 128"),
            (
                ptx((64, 1, 1), 240_000),
                usage(16, 0),
                "240000 bytes of shared memory",
            ),
            (
                ptx((64, 1, 1), 0),
                usage(16, 240_000),
                "240000 bytes of shared memory",
            ),
            (
                ptx((1024, 1, 1), 0),
                usage(65, 0),
                "65 registers × 1024 units",
            ),
        ];
        for (ptx, usage, said) in refused {
            let over = over_limit(&ptx, &usage, &props).unwrap_or_default();
            assert!(over.starts_with(said), "{over:?} for {:?}", ptx.cube_dim);
        }
    }

    #[test]
    fn figures_are_read_from_ptxas_lines() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                   ptxas info    : Function properties for k\n\
                   \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 432 bytes cmem[0]";
        let u = usage(log);
        assert_eq!(
            (
                u.registers,
                u.spill_stores,
                u.spill_loads,
                u.stack_frame,
                u.shared
            ),
            (168, 4, 12, 8, 16384)
        );
    }

    /// Every kernel of cwm's compiles for an H100/H200 (`sm_90`) as the CUDA build would at its
    /// first launch, NVIDIA's assembler takes the PTX without spilling a register to memory,
    /// and its launch stays within the GPU's limits (units, shared memory, registers). Prints
    /// each kernel's units, registers and shared memory (`--nocapture`).
    #[test]
    fn cwms_kernels_compile_for_sm_90_and_assemble_without_spills() {
        let sm = 90;
        // `CWM_PTX_DIR` keeps the PTX and machine code for a look; otherwise a folder that goes.
        let kept = std::env::var_os("CWM_PTX_DIR").map(PathBuf::from);
        let dir = kept.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("cwm-ptx-{}", std::process::id()))
        });
        std::fs::create_dir_all(&dir).unwrap();
        let props = nvidia_properties(sm);
        let (mut spilled, mut refused) = (Vec::new(), Vec::new());
        println!(
            "| kernel | compiled in | units | registers | spill stores / loads (bytes) | stack frame | shared memory |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (name, kernel) in kernels(&props) {
            let start = std::time::Instant::now();
            let ptx = compile(&name, kernel.as_ref(), sm)
                .unwrap_or_else(|e| panic!("{name} does not compile for sm_{sm}: {e}"));
            let seconds = start.elapsed().as_secs_f64();
            assert!(
                ptx.ptx.contains(".entry"),
                "{name}: no entry point in\n{}",
                ptx.ptx
            );
            if name == "product_await" {
                assert_spins_on_a_load_it_cannot_hoist(&ptx);
            }
            let u = assemble(&ptx, &dir, sm);
            let (x, y, z) = ptx.cube_dim;
            println!(
                "| {name} | {seconds:.2} s | {} | {} | {} / {} | {} | {} |",
                x * y * z,
                u.registers,
                u.spill_stores,
                u.spill_loads,
                u.stack_frame,
                ptx.shared_memory.max(u.shared as usize)
            );
            assert!(u.registers > 0, "{name}: no register count from ptxas");
            if u.spill_stores + u.spill_loads > 0 {
                spilled.push(name.clone());
            }
            if let Some(over) = over_limit(&ptx, &u, &props) {
                refused.push(format!("{name}: {over}"));
            }
        }
        if kept.is_none() {
            std::fs::remove_dir_all(&dir).ok();
        }
        assert!(
            spilled.is_empty(),
            "these kernels spill registers: {spilled:?}"
        );
        assert!(
            refused.is_empty(),
            "these launches break the GPU's limits: {refused:?}"
        );
    }
}
