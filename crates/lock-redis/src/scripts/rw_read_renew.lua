#!lua flags=allow-oom
-- Renew many read holds at once: each owner's timeout keys and the lock hash. Allowed under
-- OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id
-- Returns {request id, then one 1 (renewed) or 0 (the owner holds no read hold) per key}.
local function timeout_prefix(name, field)
    if string.find(name, '{', 1, true) then
        return name .. ':' .. field .. ':rwlock_timeout'
    end
    return '{' .. name .. '}:' .. field .. ':rwlock_timeout'
end

local renewed = {ARGV[2 * #KEYS + 1]}
for i = 1, #KEYS do
    local count = nil
    if redis.call('type', KEYS[i])['ok'] == 'hash' then
        count = tonumber(redis.call('hget', KEYS[i], ARGV[2 * i - 1]))
    end
    if count then
        local lease = tonumber(ARGV[2 * i])
        local prefix = timeout_prefix(KEYS[i], ARGV[2 * i - 1])
        for k = count, 1, -1 do
            -- Only lengthen: another hold of the same owner may have asked for a longer lease.
            if redis.call('pttl', prefix .. ':' .. k) < lease then
                redis.call('pexpire', prefix .. ':' .. k, lease)
            end
        end
        if redis.call('pttl', KEYS[i]) < lease then
            redis.call('pexpire', KEYS[i], lease)
        end
        renewed[i + 1] = 1
    else
        renewed[i + 1] = 0
    end
end
return renewed
