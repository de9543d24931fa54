#!lua flags=allow-oom
-- Delete a semaphore; a key of another type (a lock) is left alone. Announces nothing.
-- KEYS[1] semaphore; ARGV[1] request id
-- Returns {request id, 1} when it existed, {request id, 0} otherwise.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {ARGV[1], 0}
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a permit count')
end
redis.call('del', KEYS[1])
return {ARGV[1], 1}
