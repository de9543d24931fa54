#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many leaderships at once on one cluster node, whatever their slots (see
-- renew_across_slots.lua for why the names are arguments, and election_renew.lua).
-- KEYS[1] the first lock hash (it routes the call); ARGV[1..n] the lock hashes, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by
-- this node)}.
local function values_key(name)
    if string.find(name, '{', 1, true) then
        return 'distlock_leader:' .. name
    end
    return 'distlock_leader:{' .. name .. '}'
end

local n = (#ARGV - 1) / 3
local renewed = {ARGV[#ARGV]}
for i = 1, n do
    local name = ARGV[i]
    local kind = redis.pcall('type', name)
    if kind['err'] then
        renewed[i + 1] = 2
    elseif kind['ok'] == 'hash' and redis.call('hexists', name, ARGV[n + 2 * i - 1]) == 1 then
        local lease = tonumber(ARGV[n + 2 * i])
        if redis.call('pttl', name) < lease then
            redis.call('pexpire', name, lease)
        end
        local values = values_key(name)
        if redis.call('pttl', values) < lease then
            redis.call('pexpire', values, lease)
        end
        renewed[i + 1] = 1
    else
        renewed[i + 1] = 0
    end
end
return renewed
