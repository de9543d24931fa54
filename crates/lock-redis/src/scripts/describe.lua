#!lua flags=no-writes
-- Everything the server holds about one name, in one atomic read (for operators): the key of
-- whichever kind of the family uses it (both lock kinds, a read-write lock, a fair lock, an
-- election, a semaphore with or without lease-bound permits, a countdown latch) and the
-- family's other keys and channels of that name, all in its slot.
-- KEYS[1] the name, KEYS[2] its fencing counter, KEYS[3] the fair queue, KEYS[4] the fair
-- queue deadlines, KEYS[5] the lease-bound permits out, KEYS[6] the election's leader values;
-- ARGV[1] the lock's release channel, ARGV[2] the read-write lock's channel, ARGV[3] the
-- semaphore's channel, ARGV[4] the latch's channel ('' when it hashes to another slot: not
-- read), ARGV[5] the election's channel, ARGV[6] request id
-- Returns {request id, the key's type, its content (a hash: field, value, ...; a string: its
-- value; else nothing), its pttl, the counter ('' when there is none, or not a string),
-- {subscribers to the release channel with SUBSCRIBE, with SSUBSCRIBE, then to the read-write,
-- semaphore, latch (-1: not read) and election channels with either (on this node)},
-- the queue (field, ms its place has left or '' ...), the permits out (member, ms left, ...),
-- the leader values (field, value, ...)}.
-- Every command runs on every call, whatever the keys hold, so an ACL user lacking one is
-- refused at once rather than on some names only.
local kind = redis.call('type', KEYS[1])['ok']
local content = {}
if kind == 'hash' then
    content = redis.call('hgetall', KEYS[1])
elseif kind == 'string' then
    content = {redis.call('get', KEYS[1])}
end
local counter = ''
if redis.call('type', KEYS[2])['ok'] == 'string' then
    counter = redis.call('get', KEYS[2])
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Another type under a derived name is not the family's: read as empty.
local function typed(key, expected)
    local found = redis.call('type', key)['ok']
    return found == expected or found == 'none'
end
local queue = {}
local deadlines = {}
local scored = {}
if typed(KEYS[4], 'zset') then
    scored = redis.call('zrange', KEYS[4], 0, -1, 'withscores')
end
for i = 1, #scored, 2 do
    deadlines[scored[i]] = tonumber(scored[i + 1])
end
if typed(KEYS[3], 'list') then
    for _, field in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
        table.insert(queue, field)
        if deadlines[field] then
            table.insert(queue, string.format('%.0f', deadlines[field] - now))
        else
            table.insert(queue, '')
        end
    end
end
local permits = {}
if typed(KEYS[5], 'zset') then
    local members = redis.call('zrange', KEYS[5], 0, -1, 'withscores')
    for i = 1, #members, 2 do
        table.insert(permits, members[i])
        table.insert(permits, string.format('%.0f', tonumber(members[i + 1]) - now))
    end
end
local leader = {}
if typed(KEYS[6], 'hash') then
    leader = redis.call('hgetall', KEYS[6])
end
local function both(channel)
    return redis.call('pubsub', 'numsub', channel)[2] + redis.call('pubsub', 'shardnumsub', channel)[2]
end
local latch = -1
if ARGV[4] ~= '' then
    latch = both(ARGV[4])
end
local subscribers = {
    redis.call('pubsub', 'numsub', ARGV[1])[2],
    redis.call('pubsub', 'shardnumsub', ARGV[1])[2],
    both(ARGV[2]), both(ARGV[3]), latch, both(ARGV[5]),
}
return {ARGV[6], kind, content, redis.call('pttl', KEYS[1]), counter, subscribers, queue, permits, leader}
