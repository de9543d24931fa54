#!lua flags=allow-oom
-- Add permits to a semaphore (a release, or Redisson's addPermits) and announce the new count,
-- which wakes up to that many waiters. Allowed under OOM: permits given back must not leak.
-- KEYS[1] semaphore; ARGV[1] permits to add (negative: remove), ARGV[2] the semaphore's channel,
-- ARGV[3] how to announce ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[4] request id
-- Returns {request id, the new count}. A missing semaphore counts from 0, as in Redisson.
--#include announce
local count = redis.call('incrby', KEYS[1], ARGV[1])
announce(ARGV[3], ARGV[2], count)
return {ARGV[4], count}
