#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many read holds at once on one cluster node, whatever their slots (see
-- renew_across_slots.lua for why the names are arguments).
-- KEYS[1] the first lock hash (it routes the call); ARGV[1..n] the lock hashes, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (the owner holds no read hold) or 2 (not
-- served by this node)}.
local function timeout_prefix(name, field)
    if string.find(name, '{', 1, true) then
        return name .. ':' .. field .. ':rwlock_timeout'
    end
    return '{' .. name .. '}:' .. field .. ':rwlock_timeout'
end

local n = (#ARGV - 1) / 3
local renewed = {ARGV[#ARGV]}
for i = 1, n do
    local name = ARGV[i]
    local kind = redis.pcall('type', name)
    local count = nil
    if kind['err'] then
        renewed[i + 1] = 2
    else
        if kind['ok'] == 'hash' then
            count = tonumber(redis.call('hget', name, ARGV[n + 2 * i - 1]))
        end
        if count then
            local lease = tonumber(ARGV[n + 2 * i])
            local prefix = timeout_prefix(name, ARGV[n + 2 * i - 1])
            for k = count, 1, -1 do
                if redis.call('pttl', prefix .. ':' .. k) < lease then
                    redis.call('pexpire', prefix .. ':' .. k, lease)
                end
            end
            if redis.call('pttl', name) < lease then
                redis.call('pexpire', name, lease)
            end
            renewed[i + 1] = 1
        else
            renewed[i + 1] = 0
        end
    end
end
return renewed
