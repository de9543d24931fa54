#!lua flags=allow-oom
-- Renew many owners' lease-bound permits at once: every permit of the owner whose lease is
-- still running. Allowed under OOM: ZADD of existing members allocates nothing.
-- KEYS[i] semaphore count i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id. The permits out are in `{name}:timeout` (`name:timeout` when the name has its own
-- hash tag), derived here as Redisson's suffixName derives it.
-- Returns {request id, then one 1 (renewed) or 0 (no permit of the owner left) per key}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function permits_key(name)
    if string.find(name, '{', 1, true) then
        return name .. ':timeout'
    end
    return '{' .. name .. '}:timeout'
end

local renewed = {ARGV[2 * #KEYS + 1]}
for i = 1, #KEYS do
    local key = permits_key(KEYS[i])
    local prefix = ARGV[2 * i - 1] .. ':'
    local until_ms = now + tonumber(ARGV[2 * i])
    local any = 0
    if redis.call('type', key)['ok'] == 'zset' then
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
return renewed
