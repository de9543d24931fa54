#!lua flags=no-writes
-- Everything the server holds about one lock name, in one atomic read (for operators: both
-- lock kinds and any other key the name may hold).
-- KEYS[1] the lock, KEYS[2] its fencing counter; ARGV[1] its release channel; ARGV[2] request id
-- Returns {request id, the lock key's type, its content (a hash: field, count, ...; a string:
-- its value; else nothing), its pttl, the counter ('' when there is none, or not a string),
-- subscribers to the channel with SUBSCRIBE, and with SSUBSCRIBE (on this node)}.
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
local plain = redis.call('pubsub', 'numsub', ARGV[1])[2]
local sharded = redis.call('pubsub', 'shardnumsub', ARGV[1])[2]
return {ARGV[2], kind, content, redis.call('pttl', KEYS[1]), counter, plain, sharded}
