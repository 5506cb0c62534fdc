//! Why an instance is stale: one variant per reason, with its data.
//!
//! A reason is shown to people by its [`Display`](fmt::Display) and written
//! to JSON (`cwm status --json`) by its [`Serialize`], which writes the same
//! text: nothing else formats a reason. Each text starts with the reason's
//! category: `params`, `code`, `input`,
//! `output-missing`, `never-run` or `forced`.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::freshness::short;

/// Why an instance must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleReason {
    /// `--force` named it.
    Forced,
    /// `cwm.lock` has no result for it.
    NeverRun,
    /// Its stage kind is another than in the locked run.
    KindChanged {
        /// The locked kind.
        old: String,
        /// The kind now.
        new: String,
    },
    /// The code fingerprint of its kind changed.
    CodeChanged {
        /// The stage kind.
        kind: String,
        /// The locked fingerprint.
        old: String,
        /// The fingerprint now.
        new: String,
    },
    /// A keyed param has another value.
    ParamChanged {
        /// The param.
        name: String,
        /// The locked canonical value.
        old: String,
        /// The canonical value now.
        new: String,
    },
    /// A keyed param was not in the locked run.
    ParamAdded {
        /// The param.
        name: String,
        /// Its canonical value.
        value: String,
    },
    /// A keyed param of the locked run is gone.
    ParamRemoved {
        /// The param.
        name: String,
        /// Its locked canonical value.
        old: String,
    },
    /// An input is bound to other artifacts.
    InputChanged {
        /// The input.
        name: String,
        /// The locked artifact hashes.
        old: Vec<String>,
        /// The artifact hashes now.
        new: Vec<String>,
    },
    /// An input was not in the locked run.
    InputAdded {
        /// The input.
        name: String,
    },
    /// An input of the locked run is gone.
    InputRemoved {
        /// The input.
        name: String,
    },
    /// A dependency file's content changed.
    DepChanged {
        /// The file, relative to the pipeline directory.
        path: String,
    },
    /// A dependency file was not in the locked run.
    DepAdded {
        /// The file, relative to the pipeline directory.
        path: String,
    },
    /// A dependency file of the locked run is gone.
    DepRemoved {
        /// The file, relative to the pipeline directory.
        path: String,
    },
    /// A producer of one of its inputs is stale itself.
    ProducerStale {
        /// The input.
        input: String,
        /// The producing instance.
        producer: String,
    },
    /// `--dry-run`: a producer would run first, so its outputs are unknown.
    ProducerWouldRun {
        /// The producing instance.
        producer: String,
    },
    /// Its key could not be computed (the error's text).
    KeyUnknown {
        /// Why.
        error: String,
    },
    /// An output the store records for its key is not in the store.
    OutputMissing {
        /// The output.
        output: String,
        /// The artifact hash.
        artifact: String,
    },
    /// An output the store records for its key is damaged.
    OutputDamaged {
        /// The output.
        output: String,
        /// The artifact hash.
        artifact: String,
        /// What is wrong.
        problem: String,
    },
    /// The store's record of its key could not be read (the error's text).
    RecordUnreadable {
        /// Why.
        error: String,
    },
    /// Nothing changed since the locked run, but the store lacks the result.
    NotInStore {
        /// The cache key.
        key: String,
    },
}

impl StaleReason {
    /// The reason's category, the first word of its text.
    pub(crate) fn category(&self) -> &'static str {
        use StaleReason::*;
        match self {
            Forced => "forced",
            NeverRun => "never-run",
            KindChanged { .. } | CodeChanged { .. } => "code",
            ParamChanged { .. } | ParamAdded { .. } | ParamRemoved { .. } => "params",
            InputChanged { .. }
            | InputAdded { .. }
            | InputRemoved { .. }
            | DepChanged { .. }
            | DepAdded { .. }
            | DepRemoved { .. }
            | ProducerStale { .. }
            | ProducerWouldRun { .. }
            | KeyUnknown { .. } => "input",
            OutputMissing { .. }
            | OutputDamaged { .. }
            | RecordUnreadable { .. }
            | NotInStore { .. } => "output-missing",
        }
    }

    /// What `cwm status` counts it under in its summary: its category, except
    /// `upstream` for a producer that is stale itself (the instance waits on it).
    pub(crate) fn group(&self) -> &'static str {
        match self {
            StaleReason::ProducerStale { .. } => "upstream",
            other => other.category(),
        }
    }

    /// The text after the category.
    fn detail(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use StaleReason::*;
        match self {
            Forced => write!(f, "--force was given"),
            NeverRun => write!(f, "no result recorded in cwm.lock"),
            KindChanged { old, new } => write!(f, "stage kind changed {old} → {new}"),
            CodeChanged { kind, old, new } => write!(
                f,
                "the code of stage kind `{kind}` changed ({} → {})",
                code_digest(old),
                code_digest(new)
            ),
            ParamChanged { name, old, new } => write!(f, "{name} changed {old} → {new}"),
            ParamAdded { name, value } => write!(f, "{name} added ({value})"),
            ParamRemoved { name, old } => write!(f, "{name} removed (was {old})"),
            InputChanged { name, old, new } => write!(
                f,
                "`{name}` changed ({} → {})",
                short_list(old),
                short_list(new)
            ),
            InputAdded { name } => write!(f, "`{name}` added"),
            InputRemoved { name } => write!(f, "`{name}` removed"),
            DepChanged { path } => write!(f, "dependency file {path} changed"),
            DepAdded { path } => write!(f, "dependency file {path} added"),
            DepRemoved { path } => write!(f, "dependency file {path} removed"),
            ProducerStale { input, producer } => {
                write!(f, "`{input}` comes from `{producer}`, which is stale")
            }
            ProducerWouldRun { producer } => write!(f, "`{producer}` would run first"),
            KeyUnknown { error } | RecordUnreadable { error } => write!(f, "{error}"),
            OutputMissing { output, artifact } => write!(
                f,
                "output `{output}` (artifact {}) is not in the store",
                short(artifact)
            ),
            OutputDamaged {
                output,
                artifact,
                problem,
            } => write!(
                f,
                "output `{output}` (artifact {}) is damaged: {problem}",
                short(artifact)
            ),
            NotInStore { key } => write!(
                f,
                "no result for key {} in the store (pull it or rerun)",
                short(key)
            ),
        }
    }
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.category())?;
        self.detail(f)
    }
}

/// As its text, so `cwm status --json` lists reasons as strings.
impl Serialize for StaleReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reasons as one line, `; `-separated (what `cwm run --dry-run` prints).
pub(crate) fn joined(reasons: &[StaleReason]) -> String {
    let texts: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// A short digest of a code fingerprint (which may be a composite string).
fn code_digest(code: &str) -> String {
    blake3::hash(code.as_bytes()).to_hex()[..12].to_owned()
}

fn short_list(hashes: &[String]) -> String {
    let parts: Vec<&str> = hashes.iter().map(|h| short(h)).collect();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_agree_and_start_with_the_category() {
        let reasons = [
            StaleReason::Forced,
            StaleReason::NeverRun,
            StaleReason::ParamChanged {
                name: "lr".into(),
                old: "0.1".into(),
                new: "0.2".into(),
            },
            StaleReason::InputChanged {
                name: "data".into(),
                old: vec!["a".repeat(64)],
                new: vec!["b".repeat(64), "c".into()],
            },
            StaleReason::NotInStore {
                key: "d".repeat(64),
            },
        ];
        let texts: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "forced: --force was given",
                "never-run: no result recorded in cwm.lock",
                "params: lr changed 0.1 → 0.2",
                "input: `data` changed (aaaaaaaaaaaa → bbbbbbbbbbbb,c)",
                "output-missing: no result for key dddddddddddd in the store (pull it or rerun)",
            ]
        );
        for (reason, text) in reasons.iter().zip(&texts) {
            assert!(text.starts_with(reason.category()));
            assert_eq!(serde_json::to_value(reason).unwrap(), text.as_str());
        }
        assert_eq!(
            joined(&reasons[..2]),
            "forced: --force was given; never-run: no result recorded in cwm.lock"
        );
    }
}
