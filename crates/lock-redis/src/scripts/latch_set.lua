#!lua
-- Set a countdown latch's count unless it exists (Redisson's RCountDownLatch.trySetCount), and
-- announce the new count (message 1).
-- KEYS[1] latch; ARGV[1] count, ARGV[2] the latch's channel, ARGV[3] how to announce ('p'
-- PUBLISH, 's' SPUBLISH, 'b' both), ARGV[4] request id
-- Returns {request id, 1} when set, {request id, 0} when it existed (nothing changed).
if redis.call('exists', KEYS[1]) == 1 then
    return {ARGV[4], 0}
end
redis.call('set', KEYS[1], ARGV[1])
if ARGV[3] ~= 's' then
    redis.pcall('publish', ARGV[2], '1')
end
if ARGV[3] ~= 'p' then
    redis.pcall('spublish', ARGV[2], '1')
end
return {ARGV[4], 1}
