#!lua flags=no-writes
-- Read holders and remaining lease in one atomic step.
-- KEYS[1] lock hash; ARGV[1] request id
-- Returns {request id, flat list of field, count, ...; pttl}.
return {ARGV[1], redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1])}
