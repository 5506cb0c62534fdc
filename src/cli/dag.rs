//! `cwm dag`: the stage graph as Mermaid or Graphviz.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use cwm_engine::plan::Plan;

use super::{Context, VarArgs, load_plan};

/// Print the stage graph.
#[derive(Args)]
pub struct DagArgs {
    /// The pipeline file.
    pipeline: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DagFormat::Mermaid)]
    format: DagFormat,
    #[command(flatten)]
    vars: VarArgs,
}

/// A graph language.
#[derive(Clone, Copy, ValueEnum)]
enum DagFormat {
    Mermaid,
    Dot,
}

/// Runs `cwm dag`.
pub fn run(args: DagArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(Vec::new())?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let text = match args.format {
        DagFormat::Mermaid => mermaid(&plan),
        DagFormat::Dot => dot(&plan),
    };
    write!(std::io::stdout(), "{text}")?;
    Ok(ExitCode::SUCCESS)
}

/// Every edge of the plan: (producer index, consumer index, label `output→input`).
fn edges(plan: &Plan) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for &i in &plan.order {
        for (input, refs) in &plan.pipeline.instances[i].inputs {
            for r in refs {
                out.push((r.producer, i, format!("{}→{input}", r.output)));
            }
        }
    }
    out
}

fn mermaid(plan: &Plan) -> String {
    let instances = &plan.pipeline.instances;
    let mut out = String::from("flowchart TD\n");
    for &i in &plan.order {
        let name = instances[i].name.replace('"', "'");
        out.push_str(&format!("    n{i}[\"{name} ({})\"]\n", instances[i].kind));
    }
    for (from, to, label) in edges(plan) {
        out.push_str(&format!("    n{from} -->|{label}| n{to}\n"));
    }
    out
}

fn dot(plan: &Plan) -> String {
    let instances = &plan.pipeline.instances;
    let mut out = String::from("digraph cwm {\n    rankdir=TB;\n    node [shape=box];\n");
    for &i in &plan.order {
        let name = instances[i].name.replace('"', "\\\"");
        out.push_str(&format!(
            "    n{i} [label=\"{name}\\n({})\"];\n",
            instances[i].kind
        ));
    }
    for (from, to, label) in edges(plan) {
        out.push_str(&format!("    n{from} -> n{to} [label=\"{label}\"];\n"));
    }
    out.push_str("}\n");
    out
}
