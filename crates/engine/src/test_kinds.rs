//! Stage kinds for the engine's own tests: tiny, with no chess, models or shell behind them.

use cwm_stage::{
    InputSpec, InputsDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError, StageKind,
};

use crate::registry::Registry;

/// `step`: takes any inputs and any extra params, and writes its params into `out/params.txt`.
/// It stands in for a user's `command` stage in pipeline and plan tests.
pub(crate) struct Step;

impl StageKind for Step {
    fn name(&self) -> &'static str {
        "step"
    }
    fn doc(&self) -> &'static str {
        "test kind: writes its params"
    }
    fn fingerprint(&self) -> String {
        "step-v1".into()
    }
    fn params(&self) -> &'static [ParamSpec] {
        const P: &[ParamSpec] = &[ParamSpec::required("cmd", ParamType::Str, "any text")];
        P
    }
    fn accepts_extra_params(&self) -> bool {
        true
    }
    fn inputs(&self) -> InputsDecl {
        InputsDecl::Any
    }
    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let path = ctx.output("out")?.join("params.txt");
        let text = format!("{:?}\n", ctx.params());
        std::fs::write(&path, text).map_err(|e| StageError::io(&path, e))
    }
}

/// `typed`: typed params and named inputs and outputs, for validation tests.
pub(crate) struct Typed;

impl StageKind for Typed {
    fn name(&self) -> &'static str {
        "typed"
    }
    fn doc(&self) -> &'static str {
        "test kind"
    }
    fn fingerprint(&self) -> String {
        "typed".into()
    }
    fn params(&self) -> &'static [ParamSpec] {
        const P: &[ParamSpec] = &[
            ParamSpec::required("n", ParamType::Int, "a count"),
            ParamSpec::with_default("lr", ParamType::Float, ParamDefault::Float(0.1), "rate"),
            ParamSpec::optional("arch", ParamType::Choice(&["slice", "gdn"]), "family"),
        ];
        P
    }
    fn inputs(&self) -> InputsDecl {
        const I: &[InputSpec] = &[
            InputSpec::one("data", "data").optional(),
            InputSpec::many("runs", "runs").optional(),
        ];
        InputsDecl::Named(I)
    }
    fn outputs(&self) -> &'static [&'static str] {
        &["a", "b"]
    }
    fn run(&self, _ctx: &StageContext) -> Result<(), StageError> {
        Ok(())
    }
}

/// A registry of the test kinds.
pub(crate) fn registry() -> Registry {
    Registry::from_kinds(vec![Box::new(Step), Box::new(Typed)])
}
