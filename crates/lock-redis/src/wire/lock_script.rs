//! One lock script and how a call of it is written, and the Lua fragments its source is
//! assembled from.

use redis::{Cmd, Script};

/// Rules every script that needs them shares, written once in `scripts/fragments/`: a script
/// names one with a line `--#include <name>`, which [`assemble`] replaces by the fragment (a
/// Lua `local function` of that name) when the script is first used.
const FRAGMENTS: &[(&str, &str)] = &[
    (
        "announce",
        include_str!("../scripts/fragments/announce.lua"),
    ),
    (
        "next_fencing_token",
        include_str!("../scripts/fragments/next_fencing_token.lua"),
    ),
];

/// `source` with each `--#include <name>` line replaced by that fragment.
///
/// # Panics
///
/// On a name no fragment has: a mistake in a script of this crate, caught by its tests (every
/// script is assembled there).
fn assemble(source: &str) -> String {
    let mut assembled = String::with_capacity(source.len() + 1024);
    for line in source.split_inclusive('\n') {
        match line.trim_end().strip_prefix("--#include ") {
            Some(name) => {
                let (_, fragment) = FRAGMENTS
                    .iter()
                    .find(|(fragment, _)| *fragment == name.trim())
                    .unwrap_or_else(|| panic!("no Lua fragment named {name:?}"));
                assembled.push_str(fragment);
            }
            None => assembled.push_str(line),
        }
    }
    assembled
}

/// One lock script: sent by hash (`EVALSHA`), or whole (`EVAL`) when the server does not have
/// it cached, or always whole for the cleanup script (see `scripts::ABANDON`).
pub(crate) struct LockScript {
    script: Script,
    /// The assembled source, sent with `EVAL`.
    source: String,
    always_whole: bool,
}

impl LockScript {
    /// One call of the script: `EVAL <source>` when `whole`, else `EVALSHA <hash>`, then the
    /// number of keys, what `fill` adds (keys, then arguments), and the request id last.
    pub(crate) fn command(
        &self,
        whole: bool,
        keys: usize,
        fill: impl FnOnce(&mut Cmd),
        request_id: u64,
    ) -> Cmd {
        let mut command = if whole {
            let mut eval = redis::cmd("EVAL");
            eval.arg(&self.source);
            eval
        } else {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha.arg(self.script.get_hash());
            evalsha
        };
        command.arg(keys);
        fill(&mut command);
        command.arg(request_id);
        command
    }

    /// A script sent by hash, its fragments spliced in (see [`FRAGMENTS`]).
    pub(crate) fn new(source: &str) -> Self {
        let source = assemble(source);
        LockScript {
            script: Script::new(&source),
            source,
            always_whole: false,
        }
    }

    /// A script always sent whole with `EVAL`, never by hash.
    pub(crate) fn sent_whole(source: &str) -> Self {
        LockScript {
            always_whole: true,
            ..LockScript::new(source)
        }
    }

    /// The assembled source, as `EVAL` sends it.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Whether the script is always sent whole.
    pub(crate) fn always_whole(&self) -> bool {
        self.always_whole
    }

    /// The script as redis-rs knows it, for loading it into the server's cache.
    pub(crate) fn script(&self) -> &Script {
        &self.script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script of this crate, as its file reads.
    fn script_files() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts");
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("the scripts directory")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
            .map(|path| {
                let text = std::fs::read_to_string(&path).expect("a script");
                (path.display().to_string(), text)
            })
            .collect();
        files.sort();
        assert!(files.len() > 40, "found {} scripts", files.len());
        files
    }

    #[test]
    fn every_include_names_a_fragment_and_is_replaced() {
        for (path, text) in script_files() {
            let assembled = assemble(&text);
            assert!(!assembled.contains("--#include"), "{path}");
            for (name, _) in FRAGMENTS {
                let defined = assembled.contains(&format!("local function {name}("));
                let called = text.contains(&format!("{name}("));
                assert_eq!(
                    defined, called,
                    "{path}: {name} included exactly where it is called"
                );
            }
            if text.starts_with("#!") {
                assert_eq!(
                    assembled.lines().next(),
                    text.lines().next(),
                    "{path}: the flags line stays first"
                );
            }
        }
    }

    #[test]
    fn the_announcement_and_the_token_rule_are_written_once() {
        for (path, text) in script_files() {
            assert!(
                !text.contains("'spublish'") && !text.contains("'publish'"),
                "{path} announces by hand: use announce()"
            );
            assert!(
                !text.contains("token < "),
                "{path} floors a token by hand: use next_fencing_token()"
            );
        }
    }
}
