//! The crate's error type.

/// What can go wrong when configuring, building or feeding a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A family name that is not one of the canonical names.
    #[error(
        "unknown model family {0:?} (expected transformer, slice, slice_diag, gdn, gdn_pos, mamba3 or mamba2)"
    )]
    UnknownFamily(String),
    /// A size name that is not one of the presets.
    #[error("unknown model size {0:?} (expected d128, d256, d384 or d512)")]
    UnknownSize(String),
    /// A RoPE variant name that is not `reference` or `standard`.
    #[error("unknown RoPE variant {0:?} (expected reference or standard)")]
    UnknownRope(String),
    /// A configuration field with an unusable value.
    #[error("invalid model option {field}: {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// Why it is unusable.
        reason: String,
    },
    /// A checkpoint that cannot be read or written.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Tensors or host buffers whose shapes do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
}
