#!lua flags=allow-oom
-- Delete a read-write lock whoever holds it, when it is held in the given mode (Redisson's
-- forceUnlock of the read or the write lock), and announce it: 0 for read mode (wakes one
-- waiter), 1 for write mode (wakes every waiter).
-- KEYS[1] lock hash; ARGV[1] 'read' or 'write', ARGV[2] the lock's channel, ARGV[3] how to
-- announce ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[4] request id
-- Returns {request id, 1} when it was deleted, {request id, 0} otherwise.
--#include announce
if redis.call('type', KEYS[1])['ok'] ~= 'hash' or redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
    return {ARGV[4], 0}
end
redis.call('del', KEYS[1])
local message = '0'
if ARGV[1] == 'write' then
    message = '1'
end
announce(ARGV[3], ARGV[2], message)
return {ARGV[4], 1}
