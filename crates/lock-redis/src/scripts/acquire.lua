#!lua
-- Take the lock, or re-enter it, or report how long it stays held.
-- Without `allow-oom`, Redis refuses this script before it runs when the server is out of memory,
-- so an acquire never half-writes under OOM.
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] lease in ms (set on a first hold; on a re-entry only if longer than what is left),
-- ARGV[2] owner field, ARGV[3] '1' to hand out a fencing token ('k': and keep its counter), ARGV[4] request id
-- Returns {request id, 1, hold count, token or 0} when granted, {request id, 0, pttl} when held
-- by someone else. (Every script echoes the request id first, so the client can tell its reply
-- from another request's.)
-- Each branch makes as few calls as it can: a first hold is EXISTS, HSET, PEXPIRE.

-- The token comes before any write: if its key is unusable (WRONGTYPE), the script fails
-- before writing.
local function next_token()
    if ARGV[3] ~= '1' and ARGV[3] ~= 'k' then
        return 0
    end
    -- The next token is the counter + 1, but never below the server's clock in microseconds:
    -- if the counter is lost (a restart without persistence, a failover to a replica that had
    -- not received it), tokens still go up instead of restarting at 1. Both fit a Lua double
    -- exactly (below 2^53), and '%.0f' writes them back as plain integers.
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
    -- A first hold: a new key has no expiry yet, so the lease is set as it is.
    local token = next_token()
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {ARGV[4], 1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = next_token()
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    -- A re-entry only ever lengthens the lease: a nested hold with a shorter lease must not cut
    -- short the outer holds (whose guards count on their own, longer validity).
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {ARGV[4], 1, count, token}
end
return {ARGV[4], 0, redis.call('pttl', KEYS[1])}
