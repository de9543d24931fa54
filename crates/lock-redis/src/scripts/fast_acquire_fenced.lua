#!lua
-- The fast (non-reentrant) lock, when a fencing token is asked for: a plain string key holding
-- the owner, set only if absent. Without a token the client sends `SET NX PX` instead.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] '1' (the counter expires once the clock has
-- passed the token, and a lease more) or 'k' (kept), ARGV[4] request id
-- Returns {request id, 1, 1, token} when granted, {request id, 0, pttl} when held.
if redis.call('exists', KEYS[1]) == 0 then
    -- The token first, as in acquire.lua: never below the server clock in microseconds, so it
    -- still goes up after the counter is lost.
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
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[1])
    return {ARGV[4], 1, 1, token}
end
return {ARGV[4], 0, redis.call('pttl', KEYS[1])}
