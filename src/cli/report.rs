//! What a command that changes archives did (`prune`, `delete`, `rewrite`, `rename`,
//! `comment`, `tag`, `compact`): lines for people, or with `--json` one JSON object on
//! standard output (`docs/json.md`). Its figures also go to the `--log-json` summary and to
//! the hooks that follow.

use serde_json::{Map, Value};

use crate::archive::ArchiveMeta;
use crate::cli::output;
use crate::cli::summary;
use crate::error::Result;
use crate::util::id::ArchiveId;

pub struct Report {
    json: bool,
    archives: Vec<Value>,
    figures: Map<String, Value>,
}

impl Report {
    pub fn new(json: bool) -> Report {
        Report {
            json,
            archives: Vec::new(),
            figures: Map::new(),
        }
    }

    /// A line for people; left out with `--json`.
    pub fn line(&self, text: &str) -> Result<()> {
        if self.json {
            Ok(())
        } else {
            output::line(text)
        }
    }

    /// One archive the command acted on (`action`: `deleted`, `kept`, `would-prune`, …),
    /// with fields of its own in `more`.
    pub fn archive(
        &mut self,
        action: &str,
        (id, meta): (&ArchiveId, &ArchiveMeta),
        more: &[(&str, Value)],
    ) {
        let mut a = Map::new();
        a.insert("action".into(), action.into());
        a.insert("id".into(), id.to_hex().into());
        a.insert("name".into(), meta.name.clone().into());
        a.insert("time".into(), meta.start.rfc3339().into());
        for (k, v) in more {
            a.insert((*k).into(), v.clone());
        }
        self.archives.push(Value::Object(a));
    }

    /// A figure of the result: in the `--json` object, the `--log-json` summary and the
    /// hooks' environment.
    pub fn figure(&mut self, name: &str, value: impl Into<Value>) {
        let value = value.into();
        summary::figure(name, value.clone());
        self.figures.insert(name.into(), value);
    }

    /// Every field of `what` (an object) as a figure.
    pub fn figures_of(&mut self, what: &impl serde::Serialize) {
        if let Ok(Value::Object(m)) = serde_json::to_value(what) {
            for (name, value) in m {
                self.figure(&name, value);
            }
        }
    }

    /// How many archives were given as acted on in a way other than `action`.
    pub fn not(&self, action: &str) -> u64 {
        self.archives
            .iter()
            .filter(|a| a["action"] != action)
            .count() as u64
    }

    /// With `--json`, prints the object: the figures and, when the command acts on
    /// archives, `archives`.
    pub fn finish(self, with_archives: bool) -> Result<()> {
        if !self.json {
            return Ok(());
        }
        let mut m = self.figures;
        if with_archives {
            m.insert("archives".into(), Value::Array(self.archives));
        }
        output::line(&serde_json::to_string_pretty(&Value::Object(m)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::Report;

    #[test]
    fn figures_go_into_the_object_and_the_summary() {
        let mut r = Report::new(true);
        r.figure("deleted", 2);
        assert_eq!(r.figures["deleted"], 2);
        assert!(
            crate::cli::summary::hook_env().contains(&("CAIRN_HOOK_DELETED".into(), "2".into()))
        );
    }
}
