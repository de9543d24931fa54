#!lua
-- The fast (non-reentrant) lock, when a fencing token is asked for: a plain string key holding
-- the owner, set only if absent. Without a token the client sends `SET NX PX` instead.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] the lock's waiting mark
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] '1' (the counter expires once the clock has
-- passed the token, and a lease more) or 'k' (kept), ARGV[4] the waiting mark's TTL in ms when a
-- waiter of the caller's client waits for the lock, '0' otherwise: a held lock is then marked as
-- waited for (as `fast_held.lua` does), ARGV[5] request id
-- Returns {request id, 1, 1, token} when granted, {request id, 0, pttl} when held.
--#include next_fencing_token
if redis.call('exists', KEYS[1]) == 0 then
    local token = next_fencing_token(KEYS[2], ARGV[3], ARGV[1])
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[1])
    return {ARGV[5], 1, 1, token}
end
if ARGV[4] ~= '0' then
    -- pcall: a refused mark leaves the waiter to its timer (as in fast_held.lua).
    redis.pcall('set', KEYS[3], '1', 'PX', ARGV[4])
end
return {ARGV[5], 0, redis.call('pttl', KEYS[1])}
