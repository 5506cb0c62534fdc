//! Model configuration: the family, the size preset and the options that change a model.
//!
//! Names are canonical everywhere (CLI, YAML, reports): [`Family`] and [`Size`] parse from and
//! print as exactly the strings listed on their variants.

use std::fmt;
use std::str::FromStr;

use burn::prelude::Device;

use crate::error::ModelError;

/// A model family, named as everywhere else in cwm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `transformer`: pre-norm decoder, RMSNorm, SwiGLU, biases, RoPE (spec B.1).
    Transformer,
    /// `slice`: block-diagonal SLiCE, block 8 (spec B.2).
    Slice,
    /// `slice_diag`: diagonal SLiCE, block 1 (spec B.2).
    SliceDiag,
    /// `gdn`: Gated DeltaNet with negative eigenvalues (spec B.3).
    Gdn,
    /// `gdn_pos`: Gated DeltaNet with eigenvalues restricted to be positive (spec B.3).
    GdnPos,
    /// `mamba3`: Mamba-3, SISO as in the released presets; MIMO as an option (spec B.4).
    Mamba3,
    /// `mamba2`: Mamba-2 (spec B.4).
    Mamba2,
}

impl Family {
    /// Every family, in the order reports list them.
    pub const ALL: [Family; 7] = [
        Family::Transformer,
        Family::Slice,
        Family::SliceDiag,
        Family::Gdn,
        Family::GdnPos,
        Family::Mamba3,
        Family::Mamba2,
    ];

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Transformer => "transformer",
            Family::Slice => "slice",
            Family::SliceDiag => "slice_diag",
            Family::Gdn => "gdn",
            Family::GdnPos => "gdn_pos",
            Family::Mamba3 => "mamba3",
            Family::Mamba2 => "mamba2",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Family {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Family::ALL
            .into_iter()
            .find(|family| family.name() == s)
            .ok_or_else(|| ModelError::UnknownFamily(s.to_owned()))
    }
}

/// A size preset (spec B.0): model width, number of layers and of heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Size {
    /// `d128`: d = 128, 1 layer, 2 heads.
    D128,
    /// `d256`: d = 256, 2 layers, 4 heads.
    D256,
    /// `d384`: d = 384, 4 layers, 6 heads.
    D384,
    /// `d512`: d = 512, 6 layers, 8 heads.
    D512,
}

impl Size {
    /// Every size, smallest first.
    pub const ALL: [Size; 4] = [Size::D128, Size::D256, Size::D384, Size::D512];

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Size::D128 => "d128",
            Size::D256 => "d256",
            Size::D384 => "d384",
            Size::D512 => "d512",
        }
    }

    /// Model width `d`.
    pub fn d_model(self) -> usize {
        match self {
            Size::D128 => 128,
            Size::D256 => 256,
            Size::D384 => 384,
            Size::D512 => 512,
        }
    }

    /// Number of layers `L`.
    pub fn n_layers(self) -> usize {
        match self {
            Size::D128 => 1,
            Size::D256 => 2,
            Size::D384 => 4,
            Size::D512 => 6,
        }
    }

    /// Number of heads `h` (used by the Transformer and Gated DeltaNet only).
    pub fn n_heads(self) -> usize {
        match self {
            Size::D128 => 2,
            Size::D256 => 4,
            Size::D384 => 6,
            Size::D512 => 8,
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Size {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Size::ALL
            .into_iter()
            .find(|size| size.name() == s)
            .ok_or_else(|| ModelError::UnknownSize(s.to_owned()))
    }
}

/// Which rotary position embedding the Transformer uses (spec B.1, F.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Rope {
    /// `reference`: the reference code's RoPE, with interleaved pairs whose two coordinates use
    /// different frequencies (not a rotation). The default, to match the reference.
    #[default]
    Reference,
    /// `standard`: a true rotation; interleaved pair `j` turns by `t · 10000^(−2j/64)`.
    Standard,
}

impl Rope {
    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Rope::Reference => "reference",
            Rope::Standard => "standard",
        }
    }
}

impl fmt::Display for Rope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Rope {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reference" => Ok(Rope::Reference),
            "standard" => Ok(Rope::Standard),
            _ => Err(ModelError::UnknownRope(s.to_owned())),
        }
    }
}

/// How the Transformer's training attention runs on cubecl's devices (`cuda`, `cube-cpu`);
/// both compute softmax attention with the reference's dropout on the probabilities. On the CPU,
/// outside training and in the other families it changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrainingAttention {
    /// `operations`: tensor operations inside one autodiff node (`crate::attention`), the
    /// probabilities kept for the backward pass, the dropout mask drawn by burn's sampler.
    #[default]
    Operations,
    /// `kernels`: three kernels of cwm's own (`crate::attention_kernel`) that keep no
    /// `[batch, heads, seq, seq]` tensor and hash the dropout mask from a seed.
    Kernels,
}

impl TrainingAttention {
    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            TrainingAttention::Operations => "operations",
            TrainingAttention::Kernels => "kernels",
        }
    }
}

impl fmt::Display for TrainingAttention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TrainingAttention {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "operations" => Ok(TrainingAttention::Operations),
            "kernels" => Ok(TrainingAttention::Kernels),
            _ => Err(ModelError::InvalidConfig {
                field: "attention",
                reason: format!("{s:?} is neither operations nor kernels"),
            }),
        }
    }
}

/// How a recurrent family evaluates its recurrence. Both give the same numbers up to float
/// rounding; tests check that they agree on outputs and gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scan {
    /// One step at a time: the plain form that is obviously right.
    Sequential,
    /// Chunks of [`ModelConfig::chunk_size`] steps, each combined with a parallel scan.
    #[default]
    Chunked,
}

impl Scan {
    /// The canonical name (`sequential` or `chunked`).
    pub fn name(self) -> &'static str {
        match self {
            Scan::Sequential => "sequential",
            Scan::Chunked => "chunked",
        }
    }
}

impl fmt::Display for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scan {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sequential" => Ok(Scan::Sequential),
            "chunked" => Ok(Scan::Chunked),
            _ => Err(ModelError::InvalidConfig {
                field: "scan",
                reason: format!("{s:?} is not sequential or chunked"),
            }),
        }
    }
}

/// The arithmetic of a model's matrix products (spec B.4: the reference trains Mamba-3 under
/// bf16 autocast on CUDA; everything else, and every evaluation, in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// `f32`: every operation in f32. The default.
    #[default]
    F32,
    /// `bf16`: the reference's bf16 autocast as far as it changes numbers that matter: every
    /// `Linear` of the model (the output head too) multiplies bf16-rounded inputs and weights
    /// and rounds its output to bf16, and the loss's denominator is counted in bf16 (spec A.4's
    /// quirk). Parameters, gradients, the optimizer, norms, the recurrence and the
    /// cross-entropy stay f32. Only the Mamba families ([`Family::Mamba3`], [`Family::Mamba2`])
    /// implement it.
    Bf16,
}

impl Precision {
    /// The canonical name (`f32` or `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// The reference's choice for `family` on `device`: `bf16` for Mamba-3 on a GPU, `f32`
    /// otherwise (the reference autocasts only on CUDA).
    pub fn reference(family: Family, device: &Device) -> Precision {
        if family == Family::Mamba3 && *device != Device::flex() {
            Precision::Bf16
        } else {
            Precision::F32
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(ModelError::InvalidConfig {
                field: "precision",
                reason: format!("{s:?} is not f32 or bf16"),
            }),
        }
    }
}

/// Everything that determines a model's architecture and its dropout.
///
/// Build one with [`ModelConfig::new`] (the reference's defaults) and adjust fields; call
/// [`ModelConfig::validate`] (done by [`crate::Model::init`]) before use.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The family.
    pub family: Family,
    /// The size preset.
    pub size: Size,
    /// Dropout probability, applied where each family applies it (spec D.3). Default 0.1.
    pub dropout: f64,
    /// Transformer only: the RoPE variant. Default [`Rope::Reference`].
    pub rope: Rope,
    /// Transformer only: how its training attention runs on cubecl's devices. Default
    /// [`TrainingAttention::Operations`].
    pub attention: TrainingAttention,
    /// SLiCE only: block size of the transition matrices. `None` takes the family's own
    /// (8 for `slice`, 1 for `slice_diag`); it must divide `d`.
    pub slice_block_size: Option<usize>,
    /// Recurrent families: sequential or chunked evaluation. Default [`Scan::Chunked`].
    pub scan: Scan,
    /// Recurrent families: steps per chunk when [`Scan::Chunked`]. `None` (the default) takes
    /// [`default_chunk_size`] for the family and the device the model is built on; the chunk
    /// size changes the speed and the floating-point rounding, not the function computed.
    pub chunk_size: Option<usize>,
    /// Mamba-3 only: MIMO instead of the presets' SISO (spec F.1). Default false.
    pub mamba3_mimo: bool,
    /// Mamba-3 only: the MIMO rank. Default 4.
    pub mamba3_mimo_rank: usize,
    /// The arithmetic of the matrix products. Default [`Precision::F32`]; [`Precision::Bf16`]
    /// for the Mamba families only.
    pub precision: Precision,
}

impl ModelConfig {
    /// The reference configuration of `family` at `size`.
    pub fn new(family: Family, size: Size) -> Self {
        Self {
            family,
            size,
            dropout: 0.1,
            rope: Rope::Reference,
            attention: TrainingAttention::Operations,
            slice_block_size: None,
            scan: Scan::Chunked,
            chunk_size: None,
            mamba3_mimo: false,
            mamba3_mimo_rank: 4,
            precision: Precision::F32,
        }
    }

    /// Steps per chunk of the chunked scans on `device`: [`ModelConfig::chunk_size`] when set,
    /// else [`default_chunk_size`].
    pub fn chunk_size_on(&self, device: &Device) -> usize {
        self.chunk_size
            .unwrap_or_else(|| default_chunk_size(self.family, device))
            .max(1)
    }

    /// Model width `d`.
    pub fn d_model(&self) -> usize {
        self.size.d_model()
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.size.n_layers()
    }

    /// Number of heads.
    pub fn n_heads(&self) -> usize {
        self.size.n_heads()
    }

    /// SLiCE block size in effect: the override, else 8 for `slice` and 1 for the others.
    pub fn slice_block(&self) -> usize {
        self.slice_block_size.unwrap_or(match self.family {
            Family::Slice => 8,
            _ => 1,
        })
    }

    /// Checks that the options are usable.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] naming the field and why.
    pub fn validate(&self) -> Result<(), ModelError> {
        let invalid =
            |field: &'static str, reason: String| ModelError::InvalidConfig { field, reason };
        if !self.dropout.is_finite() || !(0.0..1.0).contains(&self.dropout) {
            return Err(invalid(
                "dropout",
                format!("{} is not in [0, 1)", self.dropout),
            ));
        }
        if self.chunk_size == Some(0) {
            return Err(invalid("chunk_size", "must be at least 1".into()));
        }
        let block = self.slice_block();
        if block == 0 || !self.d_model().is_multiple_of(block) {
            return Err(invalid(
                "slice_block_size",
                format!("{block} does not divide d = {}", self.d_model()),
            ));
        }
        if self.mamba3_mimo && self.mamba3_mimo_rank == 0 {
            return Err(invalid("mamba3_mimo_rank", "must be at least 1".into()));
        }
        if self.precision == Precision::Bf16
            && !matches!(self.family, Family::Mamba3 | Family::Mamba2)
        {
            return Err(invalid(
                "precision",
                format!(
                    "bf16 is implemented for mamba3 and mamba2 (the family the reference \
                     trains under bf16 autocast), not {}",
                    self.family
                ),
            ));
        }
        Ok(())
    }
}

/// Steps per chunk of a family's chunked scan when the configuration leaves it open: the
/// fastest of 4, 8, 16, 32 and 64 for a d128 training step (batch 32 × 128 tokens) on burn's
/// `flex` CPU backend, and 64 on any other device.
///
/// On the CPU the within-chunk scans cost more per step as chunks grow (SLiCE's composes 8×8
/// matrices log₂(chunk) times per step), while the carry across chunks is cheap; the figures
/// behind each family's choice are in docs/perf.md. GPUs keep 64, the size measured there.
pub fn default_chunk_size(family: Family, device: &Device) -> usize {
    if *device != Device::flex() {
        return 64;
    }
    match family {
        Family::Slice | Family::SliceDiag => 8,
        Family::Gdn | Family::GdnPos => 16,
        Family::Transformer | Family::Mamba2 | Family::Mamba3 => 64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_follows_family_and_device_unless_set() {
        let cpu = Device::flex();
        let chunk = |family| ModelConfig::new(family, Size::D128).chunk_size_on(&cpu);
        assert_eq!(chunk(Family::Slice), 8);
        assert_eq!(chunk(Family::SliceDiag), 8);
        assert_eq!(chunk(Family::Gdn), 16);
        assert_eq!(chunk(Family::GdnPos), 16);
        assert_eq!(chunk(Family::Mamba2), 64);
        assert_eq!(chunk(Family::Mamba3), 64);
        let mut config = ModelConfig::new(Family::Slice, Size::D128);
        config.chunk_size = Some(32);
        assert_eq!(config.chunk_size_on(&cpu), 32);
        config.chunk_size = Some(0);
        assert!(config.validate().is_err());
    }

    #[test]
    fn names_round_trip() {
        let names = [
            "transformer",
            "slice",
            "slice_diag",
            "gdn",
            "gdn_pos",
            "mamba3",
            "mamba2",
        ];
        for (family, name) in Family::ALL.into_iter().zip(names) {
            assert_eq!(family.to_string(), name);
            assert_eq!(name.parse::<Family>().unwrap(), family);
        }
        for size in Size::ALL {
            assert_eq!(size.to_string().parse::<Size>().unwrap(), size);
        }
        assert!(matches!(
            "Slice".parse::<Family>(),
            Err(ModelError::UnknownFamily(_))
        ));
        assert!(matches!(
            "d1024".parse::<Size>(),
            Err(ModelError::UnknownSize(_))
        ));
        assert_eq!("standard".parse::<Rope>().unwrap(), Rope::Standard);
        for precision in [Precision::F32, Precision::Bf16] {
            assert_eq!(precision.name().parse::<Precision>().unwrap(), precision);
        }
        assert!("fp16".parse::<Precision>().is_err());
        for attention in [TrainingAttention::Operations, TrainingAttention::Kernels] {
            assert_eq!(
                attention.to_string().parse::<TrainingAttention>().unwrap(),
                attention
            );
        }
        assert!(matches!(
            "flash".parse::<TrainingAttention>(),
            Err(ModelError::InvalidConfig {
                field: "attention",
                ..
            })
        ));
        let cpu = Device::flex();
        assert_eq!(Precision::reference(Family::Mamba3, &cpu), Precision::F32);
        assert_eq!(
            Precision::reference(Family::Mamba3, &cpu.autodiff()),
            Precision::F32
        );
    }

    #[test]
    fn presets() {
        let dims: Vec<_> = Size::ALL
            .iter()
            .map(|s| (s.d_model(), s.n_layers(), s.n_heads()))
            .collect();
        assert_eq!(dims, [(128, 1, 2), (256, 2, 4), (384, 4, 6), (512, 6, 8)]);
    }

    #[test]
    fn validation() {
        let mut config = ModelConfig::new(Family::Slice, Size::D128);
        assert_eq!(config.slice_block(), 8);
        assert!(config.validate().is_ok());
        config.slice_block_size = Some(3);
        assert!(matches!(
            config.validate(),
            Err(ModelError::InvalidConfig {
                field: "slice_block_size",
                ..
            })
        ));
        let mut config = ModelConfig::new(Family::Transformer, Size::D128);
        config.dropout = 1.0;
        assert!(config.validate().is_err());
        assert_eq!(
            ModelConfig::new(Family::SliceDiag, Size::D128).slice_block(),
            1
        );
    }
}
