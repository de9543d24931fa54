#!lua flags=no-writes
-- Read holders and remaining lease in one atomic step.
-- KEYS[1] lock hash
-- Returns {flat list of field, count, ...; pttl}.
return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1])}
