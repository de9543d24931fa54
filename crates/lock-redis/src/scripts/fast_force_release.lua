#!lua flags=allow-oom
-- Delete the fast lock whoever holds it and wake the waiters.
-- KEYS[1] lock key; ARGV[1] release channel, ARGV[2] release message, ARGV[3] how to announce the
-- release ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded channels), 'b' both), ARGV[4] request id
-- Returns {request id, 1} when the lock existed, {request id, 0} otherwise; WRONGTYPE for a key
-- that is not a fast lock.
--#include delete_typed
return delete_typed(KEYS[1], 'string', 'fast lock', ARGV[4], ARGV[3], ARGV[1], ARGV[2])
