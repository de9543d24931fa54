#!lua flags=allow-oom
-- Renew many read holds at once: each owner's timeout keys and the lock hash. Allowed under
-- OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id
-- Returns {request id, then one 1 (renewed) or 0 (the owner holds no read hold) per key}.
--#include renew_each
--#include renew_read_holds
return renew_each(false, renew_read_holds)
