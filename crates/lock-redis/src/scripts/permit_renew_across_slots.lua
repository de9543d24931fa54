#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many owners' lease-bound permits at once on one cluster node, whatever their slots
-- (see renew_across_slots.lua for why the names are arguments).
-- KEYS[1] the first semaphore (it routes the call); ARGV[1..n] the semaphores, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per semaphore 1 (renewed), 0 (no permit of the owner left) or 2
-- (not served by this node)}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
--#include renew_each
--#include renew_permits
return renew_each(true, renew_permits(now), permits_key)
