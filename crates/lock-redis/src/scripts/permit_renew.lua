#!lua flags=allow-oom
-- Renew many owners' lease-bound permits at once: every permit of the owner whose lease is
-- still running. Allowed under OOM: ZADD of existing members allocates nothing.
-- KEYS[i] semaphore count i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id. The permits out are in `{name}:timeout` (see permits_key).
-- Returns {request id, then one 1 (renewed) or 0 (no permit of the owner left) per key}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
--#include renew_each
--#include renew_permits
return renew_each(false, renew_permits(now), permits_key)
