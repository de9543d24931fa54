#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many owners' lease-bound permits at once on one cluster node, whatever their slots
-- (see renew_across_slots.lua for why the names are arguments).
-- KEYS[1] the first semaphore (it routes the call); ARGV[1..n] the semaphores, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per semaphore 1 (renewed), 0 (no permit of the owner left) or 2
-- (not served by this node)}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function permits_key(name)
    if string.find(name, '{', 1, true) then
        return name .. ':timeout'
    end
    return '{' .. name .. '}:timeout'
end

local n = (#ARGV - 1) / 3
local renewed = {ARGV[#ARGV]}
for i = 1, n do
    local key = permits_key(ARGV[i])
    local kind = redis.pcall('type', key)
    if kind['err'] then
        renewed[i + 1] = 2
    else
        local prefix = ARGV[n + 2 * i - 1] .. ':'
        local until_ms = now + tonumber(ARGV[n + 2 * i])
        local any = 0
        if kind['ok'] == 'zset' then
            local members = redis.call('zrange', key, 0, -1, 'withscores')
            for j = 1, #members, 2 do
                if string.sub(members[j], 1, #prefix) == prefix and tonumber(members[j + 1]) > now then
                    redis.call('zadd', key, 'gt', until_ms, members[j])
                    any = 1
                end
            end
        end
        renewed[i + 1] = any
    end
end
return renewed
