#!lua
-- Take the lock of an election (the reentrant lock's hash: the leader is its holder) and, on a
-- first hold, record the leader's value with it, in the hash `distlock_leader:{name}`
-- {owner field -> value} that lives and is renewed with the lock, and announce the new leader.
-- KEYS[1] lock hash, KEYS[2] fencing counter (the term), KEYS[3] leader values
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] '1' to hand out a fencing token ('k': and keep its counter), ARGV[4] the
-- value, ARGV[5] the election's channel, ARGV[6] how to announce ('p', 's', 'b'), ARGV[7]
-- request id
-- Returns {request id, 1, hold count, token or 0} when granted, {request id, 0, pttl} otherwise.

local function next_token()
    if ARGV[3] ~= '1' and ARGV[3] ~= 'k' then
        return 0
    end
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local token = (tonumber(redis.call('get', KEYS[2])) or 0) + 1
    if token < now then
        token = now
    end
    -- The counter lives until the server clock has passed the token, and one lease more
    -- ('1'): after that a lost counter changes nothing, as the next token is floored at
    -- the clock. 'k' keeps it for good (Redisson's fenced lock shares it: its INCR would
    -- start again at 1).
    if ARGV[3] == 'k' then
        redis.call('set', KEYS[2], string.format('%.0f', token))
    else
        redis.call('set', KEYS[2], string.format('%.0f', token), 'PX',
            math.floor((token - now) / 1000) + tonumber(ARGV[1]) + 1)
    end
    return token
end

if redis.call('exists', KEYS[1]) == 0 then
    local token = next_token()
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    -- A new leader: whatever an earlier one left goes.
    redis.call('del', KEYS[3])
    redis.call('hset', KEYS[3], ARGV[2], ARGV[4])
    redis.call('pexpire', KEYS[3], ARGV[1])
    if ARGV[6] ~= 's' then
        redis.pcall('publish', ARGV[5], '1')
    end
    if ARGV[6] ~= 'p' then
        redis.pcall('spublish', ARGV[5], '1')
    end
    return {ARGV[7], 1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = next_token()
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
        redis.call('pexpire', KEYS[3], ARGV[1])
    end
    return {ARGV[7], 1, count, token}
end
return {ARGV[7], 0, redis.call('pttl', KEYS[1])}
