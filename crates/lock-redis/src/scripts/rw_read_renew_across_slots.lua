#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many read holds at once on one cluster node, whatever their slots (see
-- renew_across_slots.lua for why the names are arguments).
-- KEYS[1] the first lock hash (it routes the call); ARGV[1..n] the lock hashes, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (the owner holds no read hold) or 2 (not
-- served by this node)}.
--#include renew_each
--#include renew_read_holds
return renew_each(true, renew_read_holds)
