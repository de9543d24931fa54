-- the fair lock (`FairBackend`).
--
-- The fair side holds the same `distlock.locks` rows as the lock (the same holders: a fair
-- hold is a lock hold, renewed and inspected by the lock's functions), and adds a queue of
-- waiting owners per name. Only the head of a queue may take a free lock; a waiter keeps its
-- place while it tries again within `queue_ms` (the contract's `QUEUE_TIMEOUT`, passed by the
-- client), and a head whose place lapsed is dropped at the next attempt. A freed lock is
-- announced to the head alone, on a channel of its own (`distlock.fair_waiter_channel`).
--
-- Every fair step that writes first takes a transaction advisory lock on its key
-- (`distlock.fair_serialize`), so the fair steps on one name run one after the other: a step
-- reads the queue and the lock and writes both as one, even while the lock has no row to lock.
-- The lock's own steps do not take it (they ignore the queue); the order is always the
-- advisory lock, then the `locks` row, then the queue's rows, so nothing can deadlock.

-- The waiters of each fair lock: `seq` is the arrival order, `deadline` (server clock) the
-- time the place lasts without its owner trying again.
CREATE TABLE IF NOT EXISTS distlock.fair_queue (
    key      bytea       NOT NULL,  -- sha256(name), as in distlock.locks
    owner    text        NOT NULL,  -- `<client id>:<holder id>`
    seq      bigint      GENERATED ALWAYS AS IDENTITY,
    deadline timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS fair_queue_order ON distlock.fair_queue (key, seq);

-- The channel on which the waiter `owner` of `key` is told that its turn came: 63 bytes,
-- `distlock_f_` and the first 26 bytes (hex) of sha256(key || owner in UTF-8). The client
-- computes the same to listen on it.
CREATE OR REPLACE FUNCTION distlock.fair_waiter_channel(p_key bytea, p_owner text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'distlock_f_' || substr(encode(sha256(p_key || convert_to(p_owner, 'UTF8')), 'hex'), 1, 52)
$$;

-- Makes the fair steps on `key` take turns until the end of the transaction (an advisory lock
-- on the first 8 bytes of the key; another name sharing them only waits its turn too).
CREATE OR REPLACE FUNCTION distlock.fair_serialize(p_key bytea) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(('x' || encode(substr(p_key, 1, 8), 'hex'))::bit(64)::bigint)
$$;

-- Tells the waiter at the head of `key`'s queue, if any, that the lock is free (the caller
-- knows it is).
CREATE OR REPLACE FUNCTION distlock.fair_wake_head(p_key bytea) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify(distlock.fair_waiter_channel(p_key, q.owner), '')
      FROM (SELECT owner FROM distlock.fair_queue WHERE key = p_key ORDER BY seq LIMIT 1) q
$$;

-- One attempt at the fair lock. Granted when the lock is free and the queue is empty or `owner`
-- is its head (the head then leaves the queue), or on a re-entry: `holds` is the owner's count
-- after it, `token` the fencing token when one was asked for. Not granted: `holds` is 0, the
-- owner is queued (`p_waits`: at the back, or keeping its place with a fresh deadline), and
-- `again_ms` says when to try again at the latest: within a third of `p_queue_ms`, when the
-- holder's lease ends, or when a head that keeps a free lock waiting lapses. Heads whose place
-- lapsed are dropped first, but not `owner` itself: it is trying, and keeps its place.
CREATE OR REPLACE FUNCTION distlock.fair_acquire(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean,
    p_waits boolean, p_queue_ms bigint,
    OUT holds integer, OUT token bigint, OUT again_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_row distlock.locks%ROWTYPE;
    v_live boolean;
    v_now timestamptz;
    v_head distlock.fair_queue%ROWTYPE;
    v_expires timestamptz;
BEGIN
    PERFORM distlock.fair_serialize(p_key);
    SELECT * INTO v_row FROM distlock.locks WHERE key = p_key FOR UPDATE;
    v_live := FOUND;
    v_now := clock_timestamp();
    v_live := v_live AND v_row.expires_at > v_now;
    LOOP
        SELECT * INTO v_head FROM distlock.fair_queue WHERE key = p_key ORDER BY seq LIMIT 1;
        EXIT WHEN NOT FOUND OR v_head.owner = p_owner OR v_head.deadline > v_now;
        DELETE FROM distlock.fair_queue WHERE key = p_key AND owner = v_head.owner;
    END LOOP;
    -- (A SELECT INTO that finds no row leaves `v_head` all NULL.)
    IF (NOT v_live AND (v_head.owner IS NULL OR v_head.owner = p_owner))
       OR (v_live AND v_row.owner = p_owner) THEN
        -- As the lock's acquire: a free lock is taken, the owner's own live hold re-entered
        -- (its expiry only lengthened). A row a lock client inserted meanwhile stays.
        v_expires := v_now + p_lease_ms * interval '1 millisecond';
        INSERT INTO distlock.locks AS l (key, name, owner, holds, expires_at)
        VALUES (p_key, p_name, p_owner, 1, v_expires)
        ON CONFLICT (key) DO UPDATE
            SET holds = CASE WHEN l.owner = p_owner AND l.expires_at > v_now THEN l.holds + 1 ELSE 1 END,
                expires_at = CASE WHEN l.owner = p_owner AND l.expires_at > v_now
                                  THEN greatest(l.expires_at, v_expires) ELSE v_expires END,
                owner = p_owner,
                name = p_name
            WHERE l.owner = p_owner OR l.expires_at <= v_now
        RETURNING l.holds INTO holds;
        IF FOUND THEN
            IF NOT v_live AND v_head.owner IS NOT NULL THEN
                DELETE FROM distlock.fair_queue WHERE key = p_key AND owner = p_owner;
            END IF;
            IF p_fencing THEN
                token := distlock.next_token(p_key);
            END IF;
            RETURN;
        END IF;
    END IF;
    holds := 0;
    IF p_waits THEN
        INSERT INTO distlock.fair_queue AS q (key, owner, deadline)
        VALUES (p_key, p_owner, v_now + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (key, owner) DO UPDATE SET deadline = EXCLUDED.deadline;
    END IF;
    again_ms := p_queue_ms / 3;
    -- Read again: a lock client may have taken the lock since the first look.
    SELECT l.expires_at INTO v_expires
      FROM distlock.locks l WHERE l.key = p_key AND l.expires_at > v_now;
    IF FOUND THEN
        again_ms := least(again_ms,
            greatest(0, ceil(extract(epoch FROM (v_expires - v_now)) * 1000))::bigint);
    ELSE
        SELECT * INTO v_head FROM distlock.fair_queue WHERE key = p_key ORDER BY seq LIMIT 1;
        IF FOUND AND v_head.owner <> p_owner THEN
            again_ms := least(again_ms,
                greatest(0, ceil(extract(epoch FROM (v_head.deadline - v_now)) * 1000))::bigint);
        END IF;
    END IF;
END
$$;

-- Gives back one hold of `owner`, as `distlock.release`, but a freed lock is announced to the
-- head of the queue alone. Returns the owner's remaining count, 0 when the lock is now free,
-- -1 when the owner held nothing.
CREATE OR REPLACE FUNCTION distlock.fair_release(p_key bytea, p_owner text, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_row distlock.locks%ROWTYPE;
    v_now timestamptz;
BEGIN
    PERFORM distlock.fair_serialize(p_key);
    SELECT * INTO v_row FROM distlock.locks WHERE key = p_key FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_row.owner <> p_owner OR v_row.expires_at <= v_now THEN
        RETURN -1;
    END IF;
    IF v_row.holds > 1 THEN
        UPDATE distlock.locks
           SET holds = holds - 1,
               expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
         WHERE key = p_key;
        RETURN v_row.holds - 1;
    END IF;
    DELETE FROM distlock.locks WHERE key = p_key;
    PERFORM distlock.fair_wake_head(p_key);
    RETURN 0;
END
$$;

-- Lowers `owner`'s count to at most `keep`, as `distlock.abandon`; a live lock it frees is
-- announced to the head of the queue alone.
CREATE OR REPLACE FUNCTION distlock.fair_abandon(p_key bytea, p_owner text, p_keep integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_row distlock.locks%ROWTYPE;
BEGIN
    PERFORM distlock.fair_serialize(p_key);
    SELECT * INTO v_row FROM distlock.locks WHERE key = p_key FOR UPDATE;
    IF NOT FOUND OR v_row.owner <> p_owner OR v_row.holds <= p_keep THEN
        RETURN;
    END IF;
    IF p_keep > 0 THEN
        UPDATE distlock.locks SET holds = p_keep WHERE key = p_key;
        RETURN;
    END IF;
    DELETE FROM distlock.locks WHERE key = p_key;
    IF v_row.expires_at > clock_timestamp() THEN
        PERFORM distlock.fair_wake_head(p_key);
    END IF;
END
$$;

-- Deletes the lock whoever holds it; when it was held, tells the head of the queue and returns
-- true.
CREATE OR REPLACE FUNCTION distlock.fair_force_release(p_key bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_expires timestamptz;
BEGIN
    PERFORM distlock.fair_serialize(p_key);
    DELETE FROM distlock.locks WHERE key = p_key RETURNING expires_at INTO v_expires;
    IF NOT FOUND OR v_expires <= clock_timestamp() THEN
        RETURN false;
    END IF;
    PERFORM distlock.fair_wake_head(p_key);
    RETURN true;
END
$$;

-- Takes `owner` out of `key`'s queue (a waiter that gave up); changes no hold. When it was the
-- head of a free lock, the new head is told. Returns whether it was queued.
CREATE OR REPLACE FUNCTION distlock.fair_leave(p_key bytea, p_owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_head text;
BEGIN
    PERFORM distlock.fair_serialize(p_key);
    SELECT owner INTO v_head FROM distlock.fair_queue WHERE key = p_key ORDER BY seq LIMIT 1;
    DELETE FROM distlock.fair_queue WHERE key = p_key AND owner = p_owner;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_head = p_owner AND NOT EXISTS (
        SELECT 1 FROM distlock.locks WHERE key = p_key AND expires_at > clock_timestamp()
    ) THEN
        PERFORM distlock.fair_wake_head(p_key);
    END IF;
    RETURN true;
END
$$;

-- The fair lock at once: the live holder (owner, count, remaining lease in ms; NULLs when
-- free) and the queue in order, each waiter with the time its place has left in ms (0: lapsed).
CREATE OR REPLACE FUNCTION distlock.fair_state(p_key bytea,
    OUT owner text, OUT holds integer, OUT ttl_ms bigint,
    OUT waiters text[], OUT waiters_left_ms bigint[])
LANGUAGE sql STABLE AS $$
    WITH clock AS (SELECT clock_timestamp() AS t)
    SELECT l.owner, l.holds,
           CASE WHEN l.owner IS NOT NULL
                THEN greatest(0, ceil(extract(epoch FROM (l.expires_at - clock.t)) * 1000))::bigint
           END,
           coalesce((SELECT array_agg(q.owner ORDER BY q.seq)
                       FROM distlock.fair_queue q WHERE q.key = p_key), '{}'),
           coalesce((SELECT array_agg(greatest(0, ceil(extract(epoch FROM (q.deadline - clock.t)) * 1000))::bigint
                                      ORDER BY q.seq)
                       FROM distlock.fair_queue q WHERE q.key = p_key), '{}')
      FROM clock
      LEFT JOIN distlock.locks l ON l.key = p_key AND l.expires_at > clock.t
$$;
