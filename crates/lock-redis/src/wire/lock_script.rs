//! One lock script and how a call of it is written, and the Lua fragments its source is
//! assembled from.

use redis::{Cmd, Script, Value};

use crate::wire::reply::echoes;

/// Rules every script that needs them shares, written once in `scripts/fragments/`: a script
/// names one with a line `--#include <name>`, which [`assemble`] replaces by the fragment (a
/// Lua `local function` of that name) when the script is first used. A fragment may include
/// others the same way, above its own function; each is spliced in once per script, before
/// its first user (a Lua local is seen only below its definition).
const FRAGMENTS: &[(&str, &str)] = &[
    (
        "announce",
        include_str!("../scripts/fragments/announce.lua"),
    ),
    (
        "next_fencing_token",
        include_str!("../scripts/fragments/next_fencing_token.lua"),
    ),
    (
        "lengthen",
        include_str!("../scripts/fragments/lengthen.lua"),
    ),
    (
        "wake_head",
        include_str!("../scripts/fragments/wake_head.lua"),
    ),
    ("reenter", include_str!("../scripts/fragments/reenter.lua")),
    (
        "give_back",
        include_str!("../scripts/fragments/give_back.lua"),
    ),
    (
        "delete_typed",
        include_str!("../scripts/fragments/delete_typed.lua"),
    ),
    (
        "read_timeout_prefix",
        include_str!("../scripts/fragments/read_timeout_prefix.lua"),
    ),
    (
        "longest_read_hold",
        include_str!("../scripts/fragments/longest_read_hold.lua"),
    ),
    (
        "drop_lapsed_read_holds",
        include_str!("../scripts/fragments/drop_lapsed_read_holds.lua"),
    ),
    (
        "renew_each",
        include_str!("../scripts/fragments/renew_each.lua"),
    ),
    (
        "renew_hold",
        include_str!("../scripts/fragments/renew_hold.lua"),
    ),
    (
        "renew_fast_hold",
        include_str!("../scripts/fragments/renew_fast_hold.lua"),
    ),
    (
        "renew_leadership",
        include_str!("../scripts/fragments/renew_leadership.lua"),
    ),
    (
        "renew_read_holds",
        include_str!("../scripts/fragments/renew_read_holds.lua"),
    ),
    (
        "renew_permits",
        include_str!("../scripts/fragments/renew_permits.lua"),
    ),
];

/// `source` with each `--#include <name>` line replaced by that fragment, itself assembled;
/// a fragment already spliced in is not spliced again.
///
/// # Panics
///
/// On a name no fragment has: a mistake in a script of this crate, caught by its tests (every
/// script is assembled there).
fn assemble(source: &str) -> String {
    let mut assembled = String::with_capacity(source.len() + 1024);
    splice(source, &mut assembled, &mut Vec::new());
    assembled
}

/// Appends `source` to `assembled`, its includes spliced in unless `spliced` names them.
fn splice(source: &str, assembled: &mut String, spliced: &mut Vec<&'static str>) {
    for line in source.split_inclusive('\n') {
        match line.trim_end().strip_prefix("--#include ") {
            Some(name) => {
                let &(name, fragment) = FRAGMENTS
                    .iter()
                    .find(|(fragment, _)| *fragment == name.trim())
                    .unwrap_or_else(|| panic!("no Lua fragment named {name:?}"));
                if !spliced.contains(&name) {
                    spliced.push(name);
                    splice(fragment, assembled, spliced);
                }
            }
            None => assembled.push_str(line),
        }
    }
}

/// One lock script: sent by hash (`EVALSHA`), or whole (`EVAL`) when the server does not have
/// it cached, or always whole for the cleanup script (see `scripts::ABANDON`).
///
/// A script answers `{request id, items...}`; one with a usual outcome may answer it with the
/// bare request id instead ([`LockScript::bare`]): a table reply costs the server about 0.5 µs
/// more per call than a bulk string (Redis 7.0 looks up its `err`/`ok` fields to convert it),
/// on a release a tenth of its server time.
///
/// A script whose request id is optional ([`LockScript::optional_id`]) is sent without one
/// where something else proves its reply (the `PING` ending a shared pipeline, or the link's
/// solitude: see `connection::ledger`), and then answers its items alone: each argument costs
/// the server about 1,400 instructions (callgrind, Redis 7.0), a tenth of a short script's run.
pub(crate) struct LockScript {
    script: Script,
    /// The assembled source, sent with `EVAL`.
    source: String,
    always_whole: bool,
    /// The reply items a bare request id stands for, for a script that answers so.
    bare: Option<&'static [i64]>,
    /// Whether the request id may be left out (see above).
    optional_id: bool,
}

/// The arguments a lock call's command is sized for: the command and the script, the key count,
/// the keys, the arguments and the request id.
const ARGS_SIZED_FOR: usize = 16;

/// The bytes of arguments a lock call's command is sized for (a name, an owner field of a UUID
/// and a holder id, a channel, a few numbers).
const DATA_SIZED_FOR: usize = 320;

impl LockScript {
    /// One call of the script: `EVAL <source>` when `whole`, else `EVALSHA <hash>`, then the
    /// number of keys, what `fill` adds (keys, then arguments), and the request id last, if
    /// any (`None` only for a script whose id is [optional](Self::optional_id)).
    pub(crate) fn command(
        &self,
        whole: bool,
        keys: usize,
        fill: impl FnOnce(&mut Cmd),
        request_id: Option<u64>,
    ) -> Cmd {
        // Sized for a lock call's arguments up front: built argument by argument, the command's
        // buffers grew (and were copied) several times per call, a measurable share of the
        // client's CPU per lock + unlock (W2). Longer names still grow it as needed.
        let mut command = if whole {
            let mut eval = Cmd::with_capacity(ARGS_SIZED_FOR, self.source.len() + DATA_SIZED_FOR);
            eval.arg("EVAL").arg(&self.source);
            eval
        } else {
            let mut evalsha = Cmd::with_capacity(ARGS_SIZED_FOR, DATA_SIZED_FOR);
            evalsha.arg("EVALSHA").arg(self.script.get_hash());
            evalsha
        };
        command.arg(keys);
        fill(&mut command);
        if let Some(request_id) = request_id {
            command.arg(request_id);
        }
        command
    }

    /// The request id a call sends when the pipeline it goes in proves its reply: none for a
    /// script whose id is [optional](Self::optional_id), else `0` (not checked).
    pub(crate) fn proven_id(&self) -> Option<u64> {
        (!self.optional_id).then_some(0)
    }

    /// A script sent by hash, its fragments spliced in (see [`FRAGMENTS`]).
    pub(crate) fn new(source: &str) -> Self {
        let source = assemble(source);
        LockScript {
            script: Script::new(&source),
            source,
            always_whole: false,
            bare: None,
            optional_id: false,
        }
    }

    /// The same script, which answers its usual outcome `items` with the bare request id (a
    /// bulk string) instead of `{request id, items...}`.
    pub(crate) fn bare(mut self, items: &'static [i64]) -> Self {
        self.bare = Some(items);
        self
    }

    /// The same script, which takes its request id as an optional last argument: sent without
    /// one, it answers its items alone (a table of them, or the bare outcome as an integer).
    /// Its arguments before the id must say by their count where the id would be.
    pub(crate) fn optional_id(mut self) -> Self {
        self.optional_id = true;
        self
    }

    /// Whether the request id may be left out ([`Self::optional_id`]).
    pub(crate) fn id_is_optional(&self) -> bool {
        self.optional_id
    }

    /// A reply of this script as its items after the request id, when it is one: `{id,
    /// items...}`, or the bare id of a script that answers so; any other reply is given back.
    /// `nonce` is the request id the call sent, checked; `None` when the call's pipeline
    /// proves its reply and it sent [`Self::proven_id`]: `0`, not checked, or no id, and then
    /// the reply is the items alone (a table, or an integer for the bare outcome).
    pub(crate) fn reply_items(
        &self,
        reply: Value,
        nonce: Option<u64>,
    ) -> Result<Vec<Value>, Value> {
        if nonce.is_none() && self.optional_id {
            return match reply {
                Value::Array(items) => Ok(items),
                Value::Int(outcome) if self.bare.is_some() => Ok(vec![Value::Int(outcome)]),
                other => Err(other),
            };
        }
        let proven = |first: Option<&Value>| nonce.is_none_or(|nonce| echoes(first, nonce));
        match (reply, self.bare) {
            (Value::Array(mut items), _) if !items.is_empty() && proven(items.first()) => {
                items.remove(0);
                Ok(items)
            }
            (bare @ Value::BulkString(_), Some(items)) if proven(Some(&bare)) => {
                Ok(items.iter().copied().map(Value::Int).collect())
            }
            (other, _) => Err(other),
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

    /// The Lua identifiers of `lua`'s code, comments left out, in order.
    fn identifiers(lua: &str) -> Vec<&str> {
        lua.lines()
            .map(|line| line.split("--").next().unwrap_or_default())
            .flat_map(|code| code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .filter(|word| !word.is_empty())
            .collect()
    }

    #[test]
    fn every_include_names_a_fragment_and_is_replaced() {
        for (path, text) in script_files() {
            let assembled = assemble(&text);
            assert!(!assembled.contains("--#include"), "{path}");
            let words = identifiers(&assembled);
            for (name, _) in FRAGMENTS {
                let definition = format!("local function {name}(");
                let defined = assembled.matches(&definition).count();
                let named = words.iter().filter(|word| *word == name).count();
                assert!(defined <= 1, "{path}: {name} spliced in {defined} times");
                if defined == 0 {
                    assert_eq!(named, 0, "{path}: {name} called but not included");
                } else {
                    assert!(named >= 2, "{path}: {name} included but never called");
                    // Defined above every call: a Lua local is seen only below it.
                    let first = words.iter().position(|word| word == name);
                    let function = words
                        .windows(3)
                        .position(|w| w == ["local", "function", *name])
                        .map(|at| at + 2);
                    assert_eq!(
                        first, function,
                        "{path}: {name} called above its definition"
                    );
                }
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

    #[test]
    fn a_bare_request_id_stands_for_the_usual_outcome_of_a_script_that_answers_so() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let plain = LockScript::new("return {ARGV[1], 0}");
        let bare = LockScript::new("return ARGV[1]").bare(&[1]);
        // `{id, items...}` from either, with the right id.
        let table = Value::Array(vec![bulk("7"), Value::Int(3)]);
        assert_eq!(
            plain.reply_items(table.clone(), Some(7)),
            Ok(vec![Value::Int(3)])
        );
        assert_eq!(
            bare.reply_items(table.clone(), Some(7)),
            Ok(vec![Value::Int(3)])
        );
        // Another request's id is given back (out of step).
        assert_eq!(bare.reply_items(table.clone(), Some(8)), Err(table));
        // The bare id: the usual outcome, only for a script that answers so.
        assert_eq!(
            bare.reply_items(bulk("7"), Some(7)),
            Ok(vec![Value::Int(1)])
        );
        assert_eq!(bare.reply_items(bulk("8"), Some(7)), Err(bulk("8")));
        assert_eq!(plain.reply_items(bulk("7"), Some(7)), Err(bulk("7")));
        // In a shared pipeline the id is not checked (its `PING` proves the replies).
        assert_eq!(bare.reply_items(bulk("0"), None), Ok(vec![Value::Int(1)]));
        assert_eq!(bare.reply_items(Value::Int(1), None), Err(Value::Int(1)));
    }

    #[test]
    fn a_script_sent_without_its_request_id_answers_its_items_alone() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let optional = LockScript::new("return ARGV[2] or 1")
            .bare(&[1])
            .optional_id();
        let required = LockScript::new("return ARGV[1]").bare(&[1]);
        // Sent under a proof, the optional one carries no id, the other the unchecked 0.
        assert_eq!(optional.proven_id(), None);
        assert_eq!(required.proven_id(), Some(0));
        let args = |script: &LockScript, id| {
            let command = script.command(
                false,
                1,
                |command| {
                    command.arg("k");
                },
                id,
            );
            command.args_iter().count()
        };
        // EVALSHA, hash, key count, key, and the id when given.
        assert_eq!(args(&optional, optional.proven_id()), 4);
        assert_eq!(args(&required, required.proven_id()), 5);
        assert_eq!(args(&optional, Some(9)), 5);
        // Without an id: the outcome as an integer, or the items as a table.
        assert_eq!(
            optional.reply_items(Value::Int(1), None),
            Ok(vec![Value::Int(1)])
        );
        assert_eq!(
            optional.reply_items(Value::Array(vec![Value::Int(0)]), None),
            Ok(vec![Value::Int(0)])
        );
        assert_eq!(optional.reply_items(bulk("x"), None), Err(bulk("x")));
        // With one, checked as for any script.
        assert_eq!(
            optional.reply_items(bulk("9"), Some(9)),
            Ok(vec![Value::Int(1)])
        );
        assert_eq!(optional.reply_items(bulk("8"), Some(9)), Err(bulk("8")));
    }
}
