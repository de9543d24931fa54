#!lua flags=allow-oom
-- Give back lease-bound permits of one owner: one (a release, the rest lengthened to the
-- lease), or down to a count (the cleanup after a call of unknown outcome). Each permit given
-- back adds one to the count; the new count is announced. Allowed under OOM: it frees memory.
-- KEYS[1] count, KEYS[2] permits out
-- ARGV[1] owner field, ARGV[2] permits to keep ('' for a release: one less), ARGV[3] lease in
-- ms, ARGV[4] the semaphore's channel, ARGV[5] how to announce ('p', 's', 'b'), ARGV[6] request
-- id
-- Returns {request id, -1} when the owner holds no permit whose lease is running (nothing
-- changed), else {request id, the owner's permits left}.
--#include announce

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local prefix = ARGV[1] .. ':'
local mine = {}
for _, member in ipairs(redis.call('zrange', KEYS[2], 0, -1, 'withscores')) do
    table.insert(mine, member)
end
local live = {}
local ends = {}
for i = 1, #mine, 2 do
    if string.sub(mine[i], 1, #prefix) == prefix and tonumber(mine[i + 1]) > now then
        table.insert(live, mine[i])
        ends[mine[i]] = tonumber(mine[i + 1])
    end
end
if #live == 0 then
    return {ARGV[6], -1}
end
local keep = #live - 1
if ARGV[2] ~= '' then
    keep = tonumber(ARGV[2])
    if #live <= keep then
        return {ARGV[6], #live}
    end
end
-- Give back the permits whose leases end first: never one a longer-leased guard counts on.
table.sort(live, function(a, b)
    return ends[a] < ends[b]
end)
local given_back = #live - keep
for i = 1, given_back do
    redis.call('zrem', KEYS[2], live[i])
end
if ARGV[2] == '' and keep > 0 then
    local until_ms = now + tonumber(ARGV[3])
    for i = given_back + 1, #live do
        redis.call('zadd', KEYS[2], 'gt', until_ms, live[i])
    end
end
local count = redis.call('incrby', KEYS[1], given_back)
announce(ARGV[5], ARGV[4], count)
return {ARGV[6], keep}
