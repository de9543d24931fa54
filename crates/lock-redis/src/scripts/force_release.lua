#!lua flags=allow-oom
-- Delete the lock whoever holds it and wake the waiters.
-- KEYS[1] lock hash; ARGV[1] release channel, ARGV[2] release message
-- Returns 1 when the lock existed, 0 otherwise.
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', ARGV[1], ARGV[2])
    return 1
end
return 0
