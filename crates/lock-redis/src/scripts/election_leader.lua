#!lua flags=no-writes
-- Read an election's leader at once: the lock's holder, its value and the lease left.
-- KEYS[1] lock hash, KEYS[2] leader values; ARGV[1] request id
-- Returns {request id, holder or false, value or false, pttl}.
local holder = redis.call('hkeys', KEYS[1])[1]
if holder == nil then
    return {ARGV[1], false, false, -2}
end
return {ARGV[1], holder, redis.call('hget', KEYS[2], holder), redis.call('pttl', KEYS[1])}
