#!lua flags=no-writes
-- Read a semaphore's available permits.
-- KEYS[1] semaphore; ARGV[1] request id
-- Returns {request id, the count} (false: the semaphore does not exist).
return {ARGV[1], redis.call('get', KEYS[1])}
