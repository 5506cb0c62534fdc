//! `cwm kinds`: the stage kinds this cwm knows, with their params.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use cwm_stage::ParamDefault;

use super::Context;

/// Runs `cwm kinds`.
pub fn run(ctx: &Context) -> Result<ExitCode> {
    for kind in ctx.registry.kinds() {
        outln!("{} — {}", kind.name(), kind.doc());
        for p in kind.params() {
            let default = match p.default.value() {
                Some(v) => format!(" (default {v})"),
                None if p.default == ParamDefault::Required => " (required)".to_owned(),
                None => String::new(),
            };
            outln!("    {}: {}{default} — {}", p.name, p.ty, p.doc);
        }
        outln!("    outputs: {}", kind.outputs().join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
