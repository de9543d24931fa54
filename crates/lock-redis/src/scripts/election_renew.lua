#!lua flags=allow-oom
-- Renew many leaderships at once: each lock hash and its leader values, which live together.
-- Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id. The values key is derived from the name (see renew_leadership).
-- Returns {request id, then one 1 (renewed) or 0 (not ours any more) per key}.
--#include renew_each
--#include renew_leadership
return renew_each(false, renew_leadership)
