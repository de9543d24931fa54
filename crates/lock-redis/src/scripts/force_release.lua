#!lua flags=allow-oom
-- Delete the lock whoever holds it and wake the waiters.
-- KEYS[1] lock hash; ARGV[1] release channel, ARGV[2] release message
-- Returns 1 when the lock existed, 0 otherwise. A key of another type is not a lock and is left
-- alone (WRONGTYPE), as every other lock call does.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a lock')
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[1], ARGV[2])
return 1
