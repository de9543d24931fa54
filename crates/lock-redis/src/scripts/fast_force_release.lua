#!lua flags=allow-oom
-- Delete the fast lock whoever holds it and wake the waiters.
-- KEYS[1] lock key; ARGV[1] release channel, ARGV[2] release message, ARGV[3] how to announce the
-- release ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded channels), 'b' both), ARGV[4] request id
-- Returns {request id, 1} when the lock existed, {request id, 0} otherwise; WRONGTYPE for a key
-- that is not a fast lock.
--#include announce
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {ARGV[4], 0}
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a fast lock')
end
redis.call('del', KEYS[1])
announce(ARGV[3], ARGV[1], ARGV[2])
return {ARGV[4], 1}
