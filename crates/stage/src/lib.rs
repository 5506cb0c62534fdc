//! The stage interface of cwm: what a stage kind declares and what it is given to run.
//!
//! This is the bottom crate of the workspace. It knows nothing of chess, burn,
//! YAML or the artifact store; every stage crate depends on it and the `cwm`
//! binary (the executor) drives it.
//!
//! Design:
//! - A [`StageKind`] is a reusable kind of step (`parse`, `train`, `command`,
//!   ...). It declares typed parameters ([`ParamSpec`]), the inputs it takes
//!   ([`InputsDecl`]), the named outputs it writes, a resource hint and a code
//!   [fingerprint](StageKind::fingerprint) that joins the cache key.
//! - The executor validates parameters against the declaration before
//!   anything runs, so [`StageKind::run`] receives well-typed [`Params`].
//! - A running stage sees only a [`StageContext`]: its params, its input
//!   artifact directories (read-only by convention), one fresh directory per
//!   output, a thread budget, a log and a [`Progress`] handle. It never touches
//!   the store or the pipeline file.
//!
//! ```
//! use cwm_stage::{Params, ParamSpec, ParamType, ParamValue, StageContext, StageError, StageKind, InputsDecl};
//!
//! struct Hello;
//! impl StageKind for Hello {
//!     fn name(&self) -> &'static str { "hello" }
//!     fn doc(&self) -> &'static str { "writes a greeting" }
//!     fn fingerprint(&self) -> String { "hello-v1".into() }
//!     fn params(&self) -> &'static [ParamSpec] {
//!         const P: &[ParamSpec] = &[ParamSpec::optional("who", ParamType::Str, "whom to greet")];
//!         P
//!     }
//!     fn inputs(&self) -> InputsDecl { InputsDecl::None }
//!     fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
//!         let who = ctx.params().str_or("who", "world");
//!         let path = ctx.output("out")?.join("greeting.txt");
//!         std::fs::write(&path, format!("hello {who}\n")).map_err(|e| StageError::io(&path, e))
//!     }
//! }
//! # let _ = Hello;
//! ```
#![deny(missing_docs)]

mod context;
mod error;
mod params;
mod progress;

pub use context::{InputArtifact, StageContext, StageLog};
pub use error::StageError;
pub use params::{ParamDefault, ParamSpec, ParamType, ParamValue, Params};
pub use progress::{Progress, ProgressEvent, ProgressSink};

/// How many worker threads a stage instance claims from the executor's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// A fixed number of threads (at least one).
    Fixed(usize),
    /// Every thread the executor has (e.g. training).
    All,
}

impl Threads {
    /// The claim of a stage whose `threads` param ([`THREADS_PARAM`]) says how many worker
    /// threads it uses: `n > 0` claims `n`, `0` (or no such param) claims all.
    pub fn from_param(params: &Params) -> Threads {
        match params.int("threads") {
            Ok(n) if n > 0 => Threads::Fixed(n as usize),
            _ => Threads::All,
        }
    }
}

/// The `threads` param of the stages that parallelise their own work (0 = all the executor
/// has); read it with [`Threads::from_param`]. It is not part of what they compute, so it is
/// [unkeyed](ParamSpec::unkeyed) and stages leave it out of anything else derived from their
/// params.
pub const THREADS_PARAM: ParamSpec = ParamSpec::with_default(
    "threads",
    ParamType::Int,
    ParamDefault::Int(0),
    "worker threads (0 = all the executor has)",
)
.unkeyed();

/// Declares the inputs a stage kind takes.
#[derive(Debug, Clone, Copy)]
pub enum InputsDecl {
    /// The kind takes no inputs.
    None,
    /// Exactly these named inputs (each one required unless marked optional).
    Named(&'static [InputSpec]),
    /// Any input names (the `command` kind).
    Any,
}

/// One named input of a stage kind.
#[derive(Debug, Clone, Copy)]
pub struct InputSpec {
    /// The input's name, as written under `inputs:` in the pipeline.
    pub name: &'static str,
    /// What the input must hold.
    pub doc: &'static str,
    /// Whether the input may be left out.
    pub optional: bool,
    /// Whether the input may reference several artifacts (a matrix or a list).
    pub many: bool,
}

impl InputSpec {
    /// A required input that references exactly one artifact.
    pub const fn one(name: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            doc,
            optional: false,
            many: false,
        }
    }

    /// A required input that may reference any number of artifacts.
    pub const fn many(name: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            doc,
            optional: false,
            many: true,
        }
    }

    /// The same input, made optional.
    pub const fn optional(self) -> Self {
        Self {
            optional: true,
            ..self
        }
    }
}

/// A kind of pipeline step, such as `parse` or `train`.
///
/// Implementations must be deterministic functions of (code, params, input
/// contents) for the cache to be sound; a stage that is not (wall-clock
/// timings in its output, say) still works, but defeats early cutoff.
pub trait StageKind: Send + Sync {
    /// The name used after `uses:` in the pipeline file.
    fn name(&self) -> &'static str;

    /// One line describing what the kind does, for `cwm` listings.
    fn doc(&self) -> &'static str;

    /// A digest of the code that computes this kind's outputs: its crate's
    /// source fingerprint combined with those of the project crates it uses
    /// (see [`combine_fingerprints`]). It joins the cache key.
    fn fingerprint(&self) -> String;

    /// The typed parameters this kind accepts.
    fn params(&self) -> &'static [ParamSpec];

    /// Whether parameters beyond [`StageKind::params`] are accepted (of any
    /// scalar or list type). Only the `command` kind says yes.
    fn accepts_extra_params(&self) -> bool {
        false
    }

    /// The inputs this kind takes.
    fn inputs(&self) -> InputsDecl;

    /// The names of the outputs this kind writes; each becomes one artifact.
    fn outputs(&self) -> &'static [&'static str] {
        &["out"]
    }

    /// How many threads an instance with these params claims.
    fn threads(&self, _params: &Params) -> Threads {
        Threads::Fixed(1)
    }

    /// Files outside the store whose *contents* join the cache key (for
    /// example a local file a `download` stage reads). Relative paths are
    /// resolved against the pipeline file's directory by the executor.
    fn external_files(&self, _params: &Params) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// Runs the stage: reads inputs, writes every declared output directory.
    fn run(&self, ctx: &StageContext) -> Result<(), StageError>;
}

/// The fingerprint of a subset of a crate's files, from the crate's
/// `FILE_FINGERPRINTS` table (written by `cwm_fingerprint::emit`). Each entry
/// of `files` is a path relative to the crate root (`src/parse.rs`) or a
/// directory prefix ending in `/` (`src/replay/`). A name that matches no file
/// still joins the digest, so a typo changes the fingerprint rather than
/// silently dropping a file.
pub fn fingerprint_of_files(table: &[(&str, &str)], files: &[&str]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for wanted in files {
        let mut matched = false;
        for (name, digest) in table {
            let hit = if wanted.ends_with('/') {
                name.starts_with(wanted)
            } else {
                name == wanted
            };
            if hit {
                parts.push(format!("{name}={digest}"));
                matched = true;
            }
        }
        if !matched {
            parts.push(format!("{wanted}=missing"));
        }
    }
    parts.join(";")
}

/// Combines several fingerprints (a stage crate's own and those of the
/// project crates it uses) into one, order-sensitively.
pub fn combine_fingerprints(parts: &[&str]) -> String {
    // A tiny, dependency-free combination: the parts are already blake3 hex
    // digests; joining them keeps the result unambiguous and stable.
    parts.join("+")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_subsets_fingerprint_only_their_files() {
        let table = [
            ("Cargo.toml", "c"),
            ("src/lib.rs", "l"),
            ("src/parse.rs", "p"),
            ("src/tokenize.rs", "t"),
            ("src/io/mod.rs", "m"),
        ];
        let parse = fingerprint_of_files(&table, &["Cargo.toml", "src/parse.rs", "src/io/"]);
        assert_eq!(parse, "Cargo.toml=c;src/parse.rs=p;src/io/mod.rs=m");
        let mut edited = table;
        edited[3].1 = "t2";
        assert_eq!(
            fingerprint_of_files(&edited, &["Cargo.toml", "src/parse.rs", "src/io/"]),
            parse,
            "editing another file leaves the subset's fingerprint alone"
        );
        assert!(fingerprint_of_files(&table, &["src/typo.rs"]).contains("missing"));
    }
}
