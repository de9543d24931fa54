#!lua flags=allow-oom
-- The fast lock found held by an attempt made while a waiter of the caller's client waits for
-- it: how long it is still held, and the lock marked as waited for (see `fast::mark_waiting`),
-- in one step, so that no mark is set on a lock that is already free.
-- KEYS[1] lock key, KEYS[2] its waiting mark; ARGV[1] the mark's TTL in ms, ARGV[2] request id
-- Returns {request id, pttl} (-2: gone, nothing marked).
local ttl = redis.call('pttl', KEYS[1])
if ttl ~= -2 then
    -- pcall: a mark refused (an ACL that does not cover it, OOM) leaves the waiter to its
    -- timer rather than failing its wait.
    redis.pcall('set', KEYS[2], '1', 'PX', ARGV[1])
end
return {ARGV[2], ttl}
