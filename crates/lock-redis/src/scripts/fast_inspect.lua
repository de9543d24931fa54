#!lua flags=no-writes
-- Read the holder and remaining lease of a fast lock in one step, in the shape of inspect.lua.
-- KEYS[1] lock key; ARGV[1] request id
-- Returns {request id, {owner, '1'} or {}, pttl}.
local owner = redis.call('get', KEYS[1])
if owner then
    return {ARGV[1], {owner, '1'}, redis.call('pttl', KEYS[1])}
end
return {ARGV[1], {}, -2}
