-- next_fencing_token(counter, mode, lease_ms): the fencing token rule (contract rule 6). `mode`
-- '1' or 'k' hands out a token, anything else returns 0 without touching the counter.
-- The token is the counter + 1, but never below the server's clock in microseconds: if the
-- counter is lost (a restart without persistence, a failover to a replica that had not received
-- it), tokens still go up instead of restarting at 1. Both fit a Lua double exactly (below
-- 2^53), and '%.0f' writes them back as plain integers.
-- The counter lives until the server clock has passed the token, and one lease more ('1'):
-- after that a lost counter changes nothing, as the next token is floored at the clock. 'k'
-- keeps it for good (Redisson's fenced lock shares it: its INCR would start again at 1).
local function next_fencing_token(counter, mode, lease_ms)
    if mode ~= '1' and mode ~= 'k' then
        return 0
    end
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local token = (tonumber(redis.call('get', counter)) or 0) + 1
    if token < now then
        token = now
    end
    if mode == 'k' then
        redis.call('set', counter, string.format('%.0f', token))
    else
        redis.call('set', counter, string.format('%.0f', token), 'PX',
            math.floor((token - now) / 1000) + tonumber(lease_ms) + 1)
    end
    return token
end
