//! One lock script and how a call of it is written.

use redis::{Cmd, Script};

/// One lock script: sent by hash (`EVALSHA`), or whole (`EVAL`) when the server does not have
/// it cached, or always whole for the cleanup script (see `scripts::ABANDON`).
pub(crate) struct LockScript {
    script: Script,
    source: &'static str,
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
            eval.arg(self.source);
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

    /// A script sent by hash.
    pub(crate) fn new(source: &'static str) -> Self {
        LockScript {
            script: Script::new(source),
            source,
            always_whole: false,
        }
    }

    /// A script always sent whole with `EVAL`, never by hash.
    pub(crate) fn sent_whole(source: &'static str) -> Self {
        LockScript {
            always_whole: true,
            ..LockScript::new(source)
        }
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
