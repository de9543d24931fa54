-- The count-down latch (`PostgresBackend` as a `LatchBackend`): Redisson's `RCountDownLatch`,
-- one count per name, set once, counted down by anyone, open at zero.

-- An opening (reaching zero, a deletion) is announced with the payload `all`, which wakes every
-- waiter of every listening client (a plain release, with an empty payload, wakes one).

-- One row per closed (or set-to-zero) latch; no row is an open latch. The count is `numeric`
-- because the contract's counts are `u64`, beyond `bigint`; the client sends and reads it as
-- text. Latches have no lease: a row stays until it is counted down to zero or deleted.
CREATE TABLE IF NOT EXISTS distlock.latches (
    key   bytea   PRIMARY KEY,  -- sha256(name)
    name  bytea   NOT NULL,     -- the name as given (UTF-8), for operators
    count numeric NOT NULL CHECK (count >= 0 AND count = trunc(count))
);

-- Sets the count of `key` unless the latch exists; returns whether it did. The new count is
-- announced, as Redisson announces it, with a single notification: nobody can be waiting on
-- a latch that did not exist (waiters only wait while it is closed).
CREATE OR REPLACE FUNCTION distlock.latch_set(p_key bytea, p_name bytea, p_count numeric)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO distlock.latches (key, name, count) VALUES (p_key, p_name, p_count)
    ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(distlock.channel(p_key), '');
    RETURN true;
END
$$;

-- Counts `key` down by one and returns the count left. At zero the row goes and the opening is
-- announced; a missing latch (open) stays open: 0, nothing announced.
CREATE OR REPLACE FUNCTION distlock.latch_count_down(p_key bytea) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_left numeric;
BEGIN
    UPDATE distlock.latches
       SET count = greatest(count - 1, 0)
     WHERE key = p_key
    RETURNING count INTO v_left;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF v_left = 0 THEN
        DELETE FROM distlock.latches WHERE key = p_key;
        PERFORM pg_notify(distlock.channel(p_key), 'all');
    END IF;
    RETURN v_left;
END
$$;

-- The count of `key` (0: open).
CREATE OR REPLACE FUNCTION distlock.latch_count(p_key bytea) RETURNS numeric
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT count FROM distlock.latches WHERE key = p_key), 0)
$$;

-- Deletes the latch `key` (an operator's reset), which opens it; announced when it existed.
-- Returns whether it existed.
CREATE OR REPLACE FUNCTION distlock.latch_delete(p_key bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM distlock.latches WHERE key = p_key;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(distlock.channel(p_key), 'all');
    RETURN true;
END
$$;
