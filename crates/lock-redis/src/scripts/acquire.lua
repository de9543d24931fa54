#!lua
-- Take the lock, or re-enter it, or report how long it stays held.
-- Without `allow-oom`, Redis refuses this script before it runs when the server is out of memory,
-- so an acquire never half-writes under OOM.
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] lease in ms (set on a first hold; on a re-entry only if longer than what is left),
-- ARGV[2] owner field, ARGV[3] '1' to hand out a fencing token ('k': and keep its counter), ARGV[4] request id
-- Returns {request id, 1, hold count, token or 0} when granted, {request id, 0, pttl} when held
-- by someone else; a first hold without a token, the usual case, answers the bare request id (a
-- bulk string costs the server less than a table: `LockScript::bare`). (Every script echoes the
-- request id, so the client can tell its reply from another request's.)
-- Each branch makes as few calls as it can: a first hold is PTTL, HSET, PEXPIRE; a refusal
-- PTTL, HEXISTS (the TTL it answers is the one read first: one script, nothing in between); a
-- re-entry PTTL, HEXISTS and its writes.
--#include next_fencing_token
--#include reenter

-- The token comes before any write: if its key is unusable (WRONGTYPE), the script fails
-- before writing.
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
    -- A first hold: a new key has no expiry yet, so the lease is set as it is.
    local token = next_fencing_token(KEYS[2], ARGV[3], ARGV[1])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if token == 0 then
        return ARGV[4]
    end
    return {ARGV[4], 1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- A re-entry only ever lengthens the lease (see reenter).
    local count, token = reenter(KEYS[1], ARGV[2], ARGV[1], KEYS[2], ARGV[3])
    return {ARGV[4], 1, count, token}
end
return {ARGV[4], 0, pttl}
