#!lua
-- Take the lock of an election (the reentrant lock's hash: the leader is its holder) and, on a
-- first hold, record the leader's value with it, in the hash `distlock_leader:{name}`
-- {owner field -> value} that lives and is renewed with the lock, and announce the new leader.
-- KEYS[1] lock hash, KEYS[2] fencing counter (the term), KEYS[3] leader values
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] '1' to hand out a fencing token ('k': and keep its counter), ARGV[4] the
-- value, ARGV[5] the election's channel, ARGV[6] how to announce ('p', 's', 'b'), ARGV[7]
-- request id
-- Returns {request id, 1, hold count, token or 0} when granted, {request id, 0, pttl} otherwise.
--#include next_fencing_token
--#include announce
--#include reenter

if redis.call('exists', KEYS[1]) == 0 then
    local token = next_fencing_token(KEYS[2], ARGV[3], ARGV[1])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    -- A new leader: whatever an earlier one left goes.
    redis.call('del', KEYS[3])
    redis.call('hset', KEYS[3], ARGV[2], ARGV[4])
    redis.call('pexpire', KEYS[3], ARGV[1])
    announce(ARGV[6], ARGV[5], '1')
    return {ARGV[7], 1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local count, token, lengthened = reenter(KEYS[1], ARGV[2], ARGV[1], KEYS[2], ARGV[3])
    -- The leader values live as long as the lock.
    if lengthened then
        redis.call('pexpire', KEYS[3], ARGV[1])
    end
    return {ARGV[7], 1, count, token}
end
return {ARGV[7], 0, redis.call('pttl', KEYS[1])}
