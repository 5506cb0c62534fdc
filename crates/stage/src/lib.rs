//! The stage interface of cwm: what a stage kind declares and what it is given to run.
//!
//! This is the bottom crate of the workspace. It knows nothing of chess, burn,
//! YAML or the artifact store; every stage crate depends on it and the `cwm`
//! binary (the executor) drives it.
//!
//! Design:
//! - A [`StageKind`] is a reusable kind of step (`parse`, `train`, `command`,
//!   ...). Its declaration, a [`KindDecl`] written as a `const`, names its typed
//!   parameters ([`ParamSpec`]), the inputs it takes ([`InputsDecl`]), the named
//!   outputs it writes, the threads it claims ([`ThreadsDecl`]) and the GPUs it claims
//!   ([`GpusDecl`]); its code is a
//!   [fingerprint](StageKind::fingerprint) that joins the cache key and
//!   [`run`](StageKind::run).
//! - The executor validates parameters against the declaration before
//!   anything runs, so [`StageKind::run`] receives well-typed [`Params`].
//! - A running stage sees only a [`StageContext`]: its params, its input
//!   artifact directories (read-only by convention), one fresh directory per
//!   output, a thread budget, the GPUs the executor assigned it
//!   ([`StageContext::gpus`], [`StageContext::cuda_ordinal`]), a log and a [`Progress`]
//!   handle. It never touches the store or the pipeline file.
//!
//! ```
//! use cwm_stage::{KindDecl, ParamSpec, ParamType, StageContext, StageError, StageKind};
//!
//! struct Hello;
//!
//! const HELLO: KindDecl = KindDecl::new("hello", "writes a greeting")
//!     .params(&[ParamSpec::optional("who", ParamType::Str, "whom to greet")]);
//!
//! impl StageKind for Hello {
//!     fn decl(&self) -> &'static KindDecl { &HELLO }
//!     fn fingerprint(&self) -> String { "hello-v1".into() }
//!     fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
//!         let who = ctx.params().str_or("who", "world");
//!         let path = ctx.output("out")?.join("greeting.txt");
//!         std::fs::write(&path, format!("hello {who}\n")).map_err(|e| StageError::io(&path, e))
//!     }
//! }
//! # assert_eq!(Hello.name(), "hello");
//! ```
#![deny(missing_docs)]

mod context;
mod decl;
mod error;
mod params;
mod progress;

pub use context::{InputArtifact, StageContext, StageLog, cuda_ordinal_in};
pub use decl::{GpusDecl, KindDecl, ThreadsDecl};
pub use error::StageError;
pub use params::{ParamDefault, ParamSpec, ParamType, ParamTypeError, ParamValue, Params};
pub use progress::{Progress, ProgressEvent, ProgressSink, StepMetrics, time_left};

/// How many worker threads a stage instance claims from the executor's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// A fixed number of threads (at least one).
    Fixed(usize),
    /// Every thread the executor has (e.g. training).
    All,
}

/// The `threads` param of the stages that parallelise their own work (0 = all the executor
/// has); a kind claims it with [`ThreadsDecl::Param`]. It is not part of what they compute, so it is
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

/// A kind of pipeline step, such as `parse` or `train`: its declaration ([`KindDecl`]), the
/// fingerprint of its code and the code itself.
///
/// Implementations must be deterministic functions of (code, params, input
/// contents) for the cache to be sound; a stage that is not (wall-clock
/// timings in its output, say) still works, but defeats early cutoff.
///
/// The provided methods read the declaration, for the executor; kinds do not override them,
/// except [`external_files`](StageKind::external_files), which is code.
pub trait StageKind: Send + Sync {
    /// What the kind declares: name, doc, params, inputs, outputs, thread and GPU claims.
    fn decl(&self) -> &'static KindDecl;

    /// A digest of the code that computes this kind's outputs: its crate's
    /// source fingerprint combined with those of the project crates it uses
    /// (see [`combine_fingerprints`]). It joins the cache key.
    fn fingerprint(&self) -> String;

    /// Runs the stage: reads inputs, writes every declared output directory.
    fn run(&self, ctx: &StageContext) -> Result<(), StageError>;

    /// Files outside the store whose *contents* join the cache key (for
    /// example a local file a `download` stage reads). Relative paths are
    /// resolved against the pipeline file's directory by the executor.
    fn external_files(&self, _params: &Params) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// The name used after `uses:` in the pipeline file ([`KindDecl::name`]).
    fn name(&self) -> &'static str {
        self.decl().name
    }

    /// One line describing what the kind does, for `cwm` listings ([`KindDecl::doc`]).
    fn doc(&self) -> &'static str {
        self.decl().doc
    }

    /// The typed parameters this kind accepts ([`KindDecl::params`]).
    fn params(&self) -> &'static [ParamSpec] {
        self.decl().params
    }

    /// Whether parameters beyond [`StageKind::params`] are accepted (of any
    /// scalar or list type) ([`KindDecl::extra_params`]).
    fn accepts_extra_params(&self) -> bool {
        self.decl().extra_params
    }

    /// The inputs this kind takes ([`KindDecl::inputs`]).
    fn inputs(&self) -> InputsDecl {
        self.decl().inputs
    }

    /// The names of the outputs this kind writes; each becomes one artifact
    /// ([`KindDecl::outputs`]).
    fn outputs(&self) -> &'static [&'static str] {
        self.decl().outputs
    }

    /// How many threads an instance with these params claims ([`KindDecl::claim`]).
    fn threads(&self, params: &Params) -> Threads {
        self.decl().claim(params)
    }

    /// How many GPUs an instance with these params claims ([`KindDecl::gpu_claim`]).
    fn gpus(&self, params: &Params) -> u32 {
        self.decl().gpu_claim(params)
    }
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

    struct Declared(&'static KindDecl);

    impl StageKind for Declared {
        fn decl(&self) -> &'static KindDecl {
            self.0
        }
        fn fingerprint(&self) -> String {
            "declared".into()
        }
        fn run(&self, _ctx: &StageContext) -> Result<(), StageError> {
            Ok(())
        }
    }

    fn with_threads(n: Option<i64>) -> Params {
        let mut params = Params::new();
        if let Some(n) = n {
            params.insert("threads", ParamValue::Int(n));
        }
        params
    }

    #[test]
    fn provided_methods_read_the_declaration() {
        const PARAMS: &[ParamSpec] = &[
            ParamSpec::required("n", ParamType::Int, "a count"),
            ParamSpec::with_default("threads", ParamType::Int, ParamDefault::Int(3), "workers"),
        ];
        const INPUTS: &[InputSpec] = &[InputSpec::many("runs", "runs").optional()];
        const DECL: KindDecl = KindDecl::new("declared", "a test kind")
            .params(PARAMS)
            .extra_params()
            .inputs(InputsDecl::Named(INPUTS))
            .outputs(&["a", "b"])
            .threads(ThreadsDecl::Param);
        let kind = Declared(&DECL);
        assert_eq!(kind.name(), "declared");
        assert_eq!(kind.doc(), "a test kind");
        let names: Vec<_> = kind.params().iter().map(|p| p.name).collect();
        assert_eq!(names, ["n", "threads"]);
        assert!(kind.accepts_extra_params());
        match kind.inputs() {
            InputsDecl::Named([runs]) => assert!(runs.name == "runs" && runs.optional && runs.many),
            other => panic!("inputs {other:?}"),
        }
        assert_eq!(kind.outputs(), ["a", "b"]);
        assert_eq!(kind.threads(&with_threads(Some(5))), Threads::Fixed(5));
        assert_eq!(kind.threads(&with_threads(Some(0))), Threads::All);
        assert_eq!(
            kind.threads(&with_threads(None)),
            Threads::Fixed(3),
            "no value: the declared default"
        );
        assert!(kind.external_files(&Params::new()).is_empty());
        assert_eq!(kind.gpus(&with_threads(Some(5))), 0, "no GPU declared");
    }

    #[test]
    fn a_bare_declaration_has_one_output_one_thread_and_nothing_else() {
        const DECL: KindDecl = KindDecl::new("bare", "nothing declared");
        let kind = Declared(&DECL);
        assert!(kind.params().is_empty());
        assert!(!kind.accepts_extra_params());
        assert!(matches!(kind.inputs(), InputsDecl::None));
        assert_eq!(kind.outputs(), ["out"]);
        assert_eq!(kind.threads(&with_threads(Some(8))), Threads::Fixed(1));
        assert_eq!(kind.decl().gpus, GpusDecl::None);
        assert_eq!(kind.gpus(&Params::new()), 0);
    }

    fn with_device(device: Option<&str>) -> Params {
        let mut params = Params::new();
        if let Some(device) = device {
            params.insert("device", ParamValue::Str(device.into()));
        }
        params
    }

    #[test]
    fn a_cuda_device_param_claims_one_gpu() {
        const DEVICE: &[ParamSpec] = &[ParamSpec::with_default(
            "device",
            ParamType::Str,
            ParamDefault::Str("cpu"),
            "where it runs",
        )];
        const DECL: KindDecl = KindDecl::new("gpu", "runs where `device` says")
            .params(DEVICE)
            .gpus(GpusDecl::CudaParam("device"));
        let kind = Declared(&DECL);
        assert_eq!(kind.gpus(&with_device(Some("cuda"))), 1);
        assert_eq!(kind.gpus(&with_device(Some("cuda:3"))), 1);
        assert_eq!(kind.gpus(&with_device(Some("cpu"))), 0);
        assert_eq!(kind.gpus(&with_device(Some("cudax"))), 0, "not cuda:N");
        assert_eq!(kind.gpus(&with_device(Some("flex"))), 0);
        assert_eq!(kind.gpus(&with_device(None)), 0, "the default, cpu");
        let mut not_a_string = Params::new();
        not_a_string.insert("device", ParamValue::Int(1));
        assert_eq!(kind.gpus(&not_a_string), 0);

        const CUDA_DEFAULT: &[ParamSpec] = &[ParamSpec::with_default(
            "on",
            ParamType::Str,
            ParamDefault::Str("cuda"),
            "where it runs",
        )];
        const ON: KindDecl = KindDecl::new("on", "runs on a GPU unless told otherwise")
            .params(CUDA_DEFAULT)
            .gpus(GpusDecl::CudaParam("on"));
        assert_eq!(ON.gpu_claim(&Params::new()), 1, "the default, cuda");
        assert_eq!(ON.gpu_claim(&with_device(Some("cpu"))), 1, "another param");
        const UNDECLARED: KindDecl =
            KindDecl::new("u", "no such param").gpus(GpusDecl::CudaParam("device"));
        assert_eq!(UNDECLARED.gpu_claim(&Params::new()), 0);
        assert_eq!(UNDECLARED.gpu_claim(&with_device(Some("cuda:0"))), 1);
    }

    #[test]
    fn thread_claims_from_the_param_or_a_function() {
        const UNDECLARED: KindDecl =
            KindDecl::new("p", "no threads param").threads(ThreadsDecl::Param);
        assert_eq!(UNDECLARED.claim(&with_threads(None)), Threads::All);
        assert_eq!(UNDECLARED.claim(&with_threads(Some(2))), Threads::Fixed(2));
        const STANDARD: KindDecl = KindDecl::new("s", "the usual threads param")
            .params(&[THREADS_PARAM])
            .threads(ThreadsDecl::Param);
        assert_eq!(STANDARD.claim(&with_threads(None)), Threads::All);
        const CUSTOM: KindDecl =
            KindDecl::new("c", "claims by its own rule").threads(ThreadsDecl::Custom(|params| {
                match params.int("threads") {
                    Ok(_) => Threads::Fixed(7),
                    Err(_) => Threads::All,
                }
            }));
        assert_eq!(CUSTOM.claim(&with_threads(Some(1))), Threads::Fixed(7));
        assert_eq!(CUSTOM.claim(&with_threads(None)), Threads::All);
    }

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
