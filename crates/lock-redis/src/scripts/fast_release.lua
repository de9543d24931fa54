#!lua flags=allow-oom
-- Release the fast lock if `owner` holds it (compare and delete), and wake the waiters when
-- someone waits: a waiter marked the lock, or the releasing client has waiters of its own.
-- Used when the server has no native compare-and-delete (Valkey 9 `DELIFEQ`, Redis 8.4 `DELEX`).
-- KEYS[1] lock key, KEYS[2] its waiting mark; ARGV[1] owner field, ARGV[2] how to announce the
-- release ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded channels), 'b' both), in capitals
-- ('P', 'S', 'B') to announce it even when the lock was not marked (the releasing client has
-- waiters of its own), left out for 'p' when no request id follows; ARGV[3] the request id,
-- left out when the call's pipeline or its link's solitude proves the reply
-- (`LockScript::optional_id`).
-- Returns, with a request id, the bare id when deleted (the usual case; a bulk string costs
-- the server less than a table: `LockScript::bare`) and {request id, 0} when the owner did not
-- hold it; without one, 1 or 0.
-- The mark is deleted with the lock in one DEL, whose count says whether it was there: a
-- release nobody waits for costs no announcement and no extra call to find that out (see
-- `fast::mark_waiting`). The channel and the message are derived here, as `keys::channel` and
-- `keys::UNLOCK_MESSAGE` say, and only when announcing: each argument of a call costs the
-- server about as much as one more command inside the script. The announcement's function is
-- defined where it is used: a Lua closure made on every run cost a release nobody waits for
-- about 420 instructions.
local id = ARGV[3]
if redis.call('get', KEYS[1]) == ARGV[1] then
    local how = ARGV[2] or 'p'
    -- Compared by value, not with `<`: Lua compares strings with the server's collation
    -- (`strcoll`), and under a locale such as en_US.UTF-8 capitals do not sort first.
    if redis.call('del', KEYS[1], KEYS[2]) == 2 or how == 'P' or how == 'S' or how == 'B' then
--#include announce
        local channel
        if string.find(KEYS[1], '{', 1, true) then
            channel = 'redisson_lock__channel:' .. KEYS[1]
        else
            channel = 'redisson_lock__channel:{' .. KEYS[1] .. '}'
        end
        announce(string.lower(how), channel, '0')
    end
    return id or 1
end
if id then
    return {id, 0}
end
return 0
