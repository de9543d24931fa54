#!lua flags=allow-oom
-- Delete a semaphore; a key of another type (a lock) is left alone. Announces nothing.
-- KEYS[1] semaphore; ARGV[1] request id
-- Returns {request id, 1} when it existed, {request id, 0} otherwise.
--#include delete_typed
return delete_typed(KEYS[1], 'string', 'permit count', ARGV[1])
