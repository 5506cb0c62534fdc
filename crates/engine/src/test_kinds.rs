//! Stage kinds for the engine's own tests: tiny, with no chess, models or shell behind them.

use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError,
    StageKind,
};

use crate::registry::Registry;

/// `step`: takes any inputs and any extra params, and writes its params into `out/params.txt`.
/// It stands in for a user's `command` stage in pipeline and plan tests.
pub(crate) struct Step;

const STEP: KindDecl = KindDecl::new("step", "test kind: writes its params")
    .params(&[ParamSpec::required("cmd", ParamType::Str, "any text")])
    .extra_params()
    .inputs(InputsDecl::Any);

impl StageKind for Step {
    fn decl(&self) -> &'static KindDecl {
        &STEP
    }
    fn fingerprint(&self) -> String {
        "step-v1".into()
    }
    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let path = ctx.output("out")?.join("params.txt");
        let text = format!("{:?}\n", ctx.params());
        std::fs::write(&path, text).map_err(|e| StageError::io(&path, e))
    }
}

/// `typed`: typed params and named inputs and outputs, for validation tests.
pub(crate) struct Typed;

const TYPED: KindDecl = KindDecl::new("typed", "test kind")
    .params(&[
        ParamSpec::required("n", ParamType::Int, "a count"),
        ParamSpec::with_default("lr", ParamType::Float, ParamDefault::Float(0.1), "rate"),
        ParamSpec::optional("arch", ParamType::Choice(&["slice", "gdn"]), "family"),
    ])
    .inputs(InputsDecl::Named(&[
        InputSpec::one("data", "data").optional(),
        InputSpec::many("runs", "runs").optional(),
    ]))
    .outputs(&["a", "b"]);

impl StageKind for Typed {
    fn decl(&self) -> &'static KindDecl {
        &TYPED
    }
    fn fingerprint(&self) -> String {
        "typed".into()
    }
    fn run(&self, _ctx: &StageContext) -> Result<(), StageError> {
        Ok(())
    }
}

/// `hold`: holds the GPUs the executor assigned for `ms` milliseconds and appends one line
/// `name start_ns end_ns gpu,gpu` to the file `log`, for the GPU pool tests.
pub(crate) struct Hold;

const HOLD: KindDecl = KindDecl::new("hold", "test kind: holds its GPUs for a while")
    .params(&[
        ParamSpec::required("log", ParamType::Str, "file the assignment is appended to"),
        ParamSpec::required("ms", ParamType::Int, "how long to hold"),
    ])
    .extra_params()
    .inputs(InputsDecl::Any);

impl StageKind for Hold {
    fn decl(&self) -> &'static KindDecl {
        &HOLD
    }
    fn fingerprint(&self) -> String {
        "hold-v1".into()
    }
    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        use std::io::Write;
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        };
        let start = now();
        std::thread::sleep(std::time::Duration::from_millis(ctx.params().uint("ms")?));
        let end = now();
        let gpus: Vec<String> = ctx.gpus().iter().map(u32::to_string).collect();
        let line = format!("{} {start} {end} {}\n", ctx.instance(), gpus.join(","));
        let log = std::path::Path::new(ctx.params().str("log")?);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| StageError::io(log, e))
    }
}

/// A registry of the test kinds.
pub(crate) fn registry() -> Registry {
    Registry::from_kinds(vec![Box::new(Step), Box::new(Typed), Box::new(Hold)])
}
