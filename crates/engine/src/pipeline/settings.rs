//! A stage's `resources:` and the file's `executor:` section, read into their types with a
//! located message for each bad value.

use std::path::PathBuf;
use std::time::Duration;

use super::decl::Vars;
use super::yaml::{Located, Node};
use super::{Loader, StageDecl};
use crate::executor::settings::{ExecutorKind, ExecutorSettings, LocalSettings, SlurmSettings};
use crate::resources::{ResourceRequest, parse_mem, parse_seconds, parse_time};

impl Loader {
    /// Reads a stage's `resources:` mapping into `decl`.
    pub(super) fn decl_resources(
        &mut self,
        decl: &mut StageDecl,
        value: &Located<Node>,
        vars: &Vars,
    ) {
        let Some(entries) = self
            .substitute(value, vars)
            .and_then(|v| self.mapping(v, "`resources`"))
        else {
            return;
        };
        let mut request = ResourceRequest::default();
        for (key, node) in &entries {
            match key.value.as_str() {
                "cpus" => request.cpus = self.count(node, 1, "`cpus`"),
                "gpus" => request.gpus = self.count(node, 0, "`gpus`"),
                "mem" => request.mem_mib = self.size(node, "`mem`", parse_mem),
                "time" => request.time_min = self.size(node, "`time`", parse_time),
                other => self.error(
                    key.loc,
                    format!("unknown resource `{other}`: expected cpus, mem, gpus or time"),
                ),
            }
        }
        decl.resources = request;
    }

    /// Reads the top-level `executor:` section.
    pub(super) fn executor_settings(
        &mut self,
        value: Option<&Located<Node>>,
        vars: &Vars,
    ) -> ExecutorSettings {
        let mut settings = ExecutorSettings::default();
        let Some(entries) = value
            .and_then(|v| self.substitute(v, vars))
            .and_then(|v| self.mapping(v, "`executor`"))
        else {
            return settings;
        };
        for (key, node) in &entries {
            match key.value.as_str() {
                "kind" => {
                    if let Some(kind) = self.text(node, "`kind` (local or slurm)") {
                        match ExecutorKind::from_name(&kind) {
                            Some(k) => settings.kind = k,
                            None => self.error(
                                node.loc,
                                format!("unknown executor `{kind}`: expected local or slurm"),
                            ),
                        }
                    }
                }
                "local" => settings.local = self.local_settings(node),
                "slurm" => settings.slurm = self.slurm_settings(node),
                other => self.error(
                    key.loc,
                    format!("unknown key `{other}` in `executor`: expected kind, local or slurm"),
                ),
            }
        }
        settings
    }

    fn local_settings(&mut self, value: &Located<Node>) -> LocalSettings {
        let mut settings = LocalSettings::default();
        let Some(entries) = self.mapping(value.clone(), "`executor: local`") else {
            return settings;
        };
        for (key, node) in &entries {
            match (key.value.as_str(), &node.value) {
                ("gpus", Node::Seq(items)) => {
                    let ids = items.iter().filter_map(|i| self.count(i, 0, "a GPU id"));
                    settings.gpus = Some(ids.collect());
                }
                ("gpus", other) => self.error(
                    node.loc,
                    format!("`gpus` must be a list of GPU ids, found {}", other.kind()),
                ),
                (other, _) => self.error(
                    key.loc,
                    format!("unknown key `{other}` in `executor: local`: expected gpus"),
                ),
            }
        }
        settings
    }

    fn slurm_settings(&mut self, value: &Located<Node>) -> SlurmSettings {
        let mut s = SlurmSettings::default();
        let Some(entries) = self.mapping(value.clone(), "`executor: slurm`") else {
            return s;
        };
        for (key, node) in &entries {
            let seconds = |l: &mut Self, what| l.size(node, what, parse_seconds);
            match key.value.as_str() {
                "partition" => s.partition = self.text(node, "a partition name"),
                "account" => s.account = self.text(node, "an account name"),
                "qos" => s.qos = self.text(node, "a QOS name"),
                "sbatch" => s.sbatch = self.texts(node, "sbatch options"),
                "cwm" => s.cwm = self.text(node, "a path").map(PathBuf::from),
                "max_jobs" => set(&mut s.max_jobs, self.count(node, 1, "`max_jobs`")),
                "cpus_for_all" => set(&mut s.cpus_for_all, self.count(node, 1, "`cpus_for_all`")),
                "poll" => set(
                    &mut s.poll,
                    seconds(self, "`poll`").map(Duration::from_secs),
                ),
                "warn" => set(
                    &mut s.warn,
                    seconds(self, "`warn`").map(Duration::from_secs),
                ),
                "probe_timeout" => set(
                    &mut s.probe_timeout,
                    seconds(self, "`probe_timeout`").map(Duration::from_secs),
                ),
                other => self.error(
                    key.loc,
                    format!(
                        "unknown key `{other}` in `executor: slurm`: expected partition, account, \
                         qos, sbatch, max_jobs, poll, warn, cpus_for_all, cwm or probe_timeout"
                    ),
                ),
            }
        }
        s
    }

    /// The entries of a mapping, or `None` with a message.
    fn mapping(
        &mut self,
        value: Located<Node>,
        what: &str,
    ) -> Option<Vec<(Located<String>, Located<Node>)>> {
        match value.value {
            Node::Map(entries) => Some(entries),
            Node::Null => Some(Vec::new()),
            other => {
                let message = format!("{what} must be a mapping, found {}", other.kind());
                self.error(value.loc, message);
                None
            }
        }
    }

    /// A whole number at least `min`.
    fn count<T: TryFrom<i64>>(&mut self, node: &Located<Node>, min: i64, what: &str) -> Option<T> {
        match node.value {
            Node::Int(n) if n >= min => T::try_from(n).ok(),
            ref other => {
                let found = other.kind();
                self.error(
                    node.loc,
                    format!("{what} must be a whole number of at least {min}, found {found}"),
                );
                None
            }
        }
    }

    /// A size or duration written as a number or as text `parse` reads.
    fn size(
        &mut self,
        node: &Located<Node>,
        what: &str,
        parse: fn(&str) -> Result<u64, String>,
    ) -> Option<u64> {
        let text = match &node.value {
            Node::Int(n) => n.to_string(),
            Node::Str(s) => s.clone(),
            other => {
                let message = format!("{what} must be a number or text, found {}", other.kind());
                self.error(node.loc, message);
                return None;
            }
        };
        parse(&text).map_err(|e| self.error(node.loc, e)).ok()
    }

    fn text(&mut self, node: &Located<Node>, what: &str) -> Option<String> {
        match &node.value {
            Node::Str(s) => Some(s.clone()),
            other => {
                let message = format!("expected {what}, found {}", other.kind());
                self.error(node.loc, message);
                None
            }
        }
    }

    /// A list of strings, or one string.
    fn texts(&mut self, node: &Located<Node>, what: &str) -> Vec<String> {
        match &node.value {
            Node::Seq(items) => items.iter().filter_map(|i| self.text(i, what)).collect(),
            _ => self.text(node, what).into_iter().collect(),
        }
    }
}

/// Sets `slot` when a value was read.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}
