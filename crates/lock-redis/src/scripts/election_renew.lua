#!lua flags=allow-oom
-- Renew many leaderships at once: each lock hash and its leader values, which live together.
-- Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id. The values key is `distlock_leader:{name}` (`distlock_leader:name` when the
-- name has its own hash tag), derived here as the client derives it.
-- Returns {request id, then one 1 (renewed) or 0 (not ours any more) per key}.
local function values_key(name)
    if string.find(name, '{', 1, true) then
        return 'distlock_leader:' .. name
    end
    return 'distlock_leader:{' .. name .. '}'
end

local renewed = {ARGV[2 * #KEYS + 1]}
for i = 1, #KEYS do
    if redis.call('type', KEYS[i])['ok'] == 'hash'
        and redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1 then
        if redis.call('pttl', KEYS[i]) < tonumber(ARGV[2 * i]) then
            redis.call('pexpire', KEYS[i], ARGV[2 * i])
        end
        local values = values_key(KEYS[i])
        if redis.call('pttl', values) < tonumber(ARGV[2 * i]) then
            redis.call('pexpire', values, ARGV[2 * i])
        end
        renewed[i + 1] = 1
    else
        renewed[i + 1] = 0
    end
end
return renewed
