//! What a stage kind declares about itself, as data: [`KindDecl`], [`ThreadsDecl`] and
//! [`GpusDecl`].

use crate::{InputsDecl, ParamDefault, ParamSpec, ParamValue, Params, Threads};

/// Everything a stage kind declares except its code: its name, what it does, the params and
/// inputs it takes, the outputs it writes, and the threads and GPUs it claims. A kind writes it
/// once as a `const` and returns it from [`StageKind::decl`](crate::StageKind::decl); the
/// trait's provided methods (`name`, `params`, `threads`, `gpus`, ...) read it.
///
/// Built with [`KindDecl::new`] and the `const` setters below, which start from no params,
/// no extra params, no inputs, the one output `out`, one thread and no GPU:
///
/// ```
/// use cwm_stage::{InputSpec, InputsDecl, KindDecl, ParamSpec, ParamType, ThreadsDecl};
///
/// const DECL: KindDecl = KindDecl::new("count", "counts the lines of its input")
///     .params(&[ParamSpec::optional("pattern", ParamType::Str, "count only matching lines")])
///     .inputs(InputsDecl::Named(&[InputSpec::one("text", "a directory of text files")]))
///     .outputs(&["counts"])
///     .threads(ThreadsDecl::Fixed(2));
/// assert_eq!(DECL.name, "count");
/// assert_eq!(DECL.outputs, ["counts"]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct KindDecl {
    /// The name used after `uses:` in the pipeline file.
    pub name: &'static str,
    /// One line describing what the kind does, for `cwm` listings.
    pub doc: &'static str,
    /// The typed parameters the kind accepts.
    pub params: &'static [ParamSpec],
    /// Whether parameters beyond `params` are accepted (of any scalar or list type).
    pub extra_params: bool,
    /// The inputs the kind takes.
    pub inputs: InputsDecl,
    /// The names of the outputs the kind writes; each becomes one artifact.
    pub outputs: &'static [&'static str],
    /// How many threads an instance claims.
    pub threads: ThreadsDecl,
    /// How many GPUs an instance claims.
    pub gpus: GpusDecl,
}

impl KindDecl {
    /// A kind named `name`, described by `doc`, with no params or inputs, the one output `out`,
    /// one thread and no GPU.
    pub const fn new(name: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            doc,
            params: &[],
            extra_params: false,
            inputs: InputsDecl::None,
            outputs: &["out"],
            threads: ThreadsDecl::Fixed(1),
            gpus: GpusDecl::None,
        }
    }

    /// The same declaration with these params.
    pub const fn params(self, params: &'static [ParamSpec]) -> Self {
        Self { params, ..self }
    }

    /// The same declaration, also accepting params it does not declare.
    pub const fn extra_params(self) -> Self {
        Self {
            extra_params: true,
            ..self
        }
    }

    /// The same declaration with these inputs.
    pub const fn inputs(self, inputs: InputsDecl) -> Self {
        Self { inputs, ..self }
    }

    /// The same declaration with these outputs.
    pub const fn outputs(self, outputs: &'static [&'static str]) -> Self {
        Self { outputs, ..self }
    }

    /// The same declaration with this thread claim.
    pub const fn threads(self, threads: ThreadsDecl) -> Self {
        Self { threads, ..self }
    }

    /// The same declaration with this GPU claim.
    pub const fn gpus(self, gpus: GpusDecl) -> Self {
        Self { gpus, ..self }
    }

    /// How many GPUs an instance with these params claims (see [`GpusDecl`]).
    pub fn gpu_claim(&self, params: &Params) -> u32 {
        match self.gpus {
            GpusDecl::None => 0,
            GpusDecl::CudaParam(name) => {
                let declared = self.params.iter().find(|p| p.name == name);
                let value = match (params.get(name), declared.map(|p| p.default)) {
                    (Some(ParamValue::Str(value)), _) => value.as_str(),
                    (None, Some(ParamDefault::Str(value))) => value,
                    _ => return 0,
                };
                u32::from(is_cuda_device(value))
            }
        }
    }

    /// How many threads an instance with these params claims.
    pub fn claim(&self, params: &Params) -> Threads {
        match self.threads {
            ThreadsDecl::Fixed(n) => Threads::Fixed(n),
            ThreadsDecl::Param => {
                let declared = self.params.iter().find(|p| p.name == "threads");
                let n = match (params.int("threads"), declared.map(|p| p.default)) {
                    (Ok(n), _) => n,
                    (Err(_), Some(ParamDefault::Int(n))) => n,
                    (Err(_), _) => 0,
                };
                if n > 0 {
                    Threads::Fixed(n as usize)
                } else {
                    Threads::All
                }
            }
            ThreadsDecl::Custom(claim) => claim(params),
        }
    }
}

/// How many threads a stage kind's instances claim from the executor's budget.
#[derive(Debug, Clone, Copy)]
pub enum ThreadsDecl {
    /// Always this many (at least one).
    Fixed(usize),
    /// As many as the instance's `threads` param says ([`THREADS_PARAM`](crate::THREADS_PARAM)
    /// or the kind's own): `n > 0` claims `n`, `0` claims all. Without a value it is the
    /// declared param's default, and all if the kind declares no `threads` param.
    Param,
    /// Computed from the instance's params by this function.
    Custom(fn(&Params) -> Threads),
}

/// How many GPUs a stage kind's instances claim from the executor, which gives each running
/// instance its own ([`StageContext::gpus`](crate::StageContext::gpus)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpusDecl {
    /// None: the kind never runs on a GPU.
    #[default]
    None,
    /// One GPU when the named string param's value is `cuda` or starts with `cuda:`, else
    /// none. Without a value it is the declared param's default; a param that is not a string
    /// claims none.
    CudaParam(&'static str),
}

/// Whether a device name (a `device` param) names a CUDA device: `cuda` or `cuda:...`.
fn is_cuda_device(name: &str) -> bool {
    name == "cuda" || name.starts_with("cuda:")
}
