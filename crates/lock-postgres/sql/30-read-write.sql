-- the read-write lock (`ReadWriteBackend`).
--
-- Redisson's `RReadWriteLock` semantics (as `MemoryBackend` and the Redis backend keep them) in
-- tables of its own, apart from the lock's: one row per held name with its mode and its writer,
-- one row per reader with the expiry of each of its read holds, and the writers that wait on a
-- writer-preferring side. Readers share the lock, a writer excludes everyone else but may
-- re-enter and also read (a downgrade). Each read hold has a lease of its own; the lock lasts
-- as long as its longest hold.
--
-- Every step locks the name's `rw_locks` row first (`FOR UPDATE`, in key order for a batch;
-- for a free name, the insertion of its row: `ON CONFLICT DO NOTHING`, looking again when a
-- concurrent step inserted it first) and only then writes `rw_readers` rows or writers' places,
-- so the steps on one name run one after the other and nothing can deadlock. (A writer giving
-- up deletes its own place alone, holding nothing else.)

-- One row per held read-write lock. A row whose `expires_at` has passed is a free lock (with
-- its readers, which go with it): acquires delete it, the reads ignore it.
CREATE TABLE IF NOT EXISTS distlock.rw_locks (
    key        bytea       PRIMARY KEY,  -- sha256(name)
    name       bytea       NOT NULL,     -- the name as given (UTF-8), for listings
    mode       text        NOT NULL CHECK (mode IN ('read', 'write')),
    writer     text,                     -- the owner field holding the write side
    writes     integer     CHECK (writes > 0),  -- its write hold count
    expires_at timestamptz NOT NULL,
    CHECK ((writer IS NULL) = (writes IS NULL)),
    CHECK ((mode = 'write') = (writer IS NOT NULL))
);

-- The read holds of each owner field on a held lock: the expiry of each hold (one element per
-- hold, as Redisson's `…:rwlock_timeout:<k>` keys). A lapsed element is a hold that ended: the
-- owner's next read acquire forgets it, a release gives it back first.
CREATE TABLE IF NOT EXISTS distlock.rw_readers (
    key   bytea         NOT NULL REFERENCES distlock.rw_locks (key) ON DELETE CASCADE,
    owner text          NOT NULL,  -- `<client id>:<holder id>`
    holds timestamptz[] NOT NULL CHECK (cardinality(holds) > 0),
    PRIMARY KEY (key, owner)
);

-- The writers of writer-preferring sides that wait for a name (kept while the lock is free too):
-- while one waits, no owner field that holds no read hold gets one. A place lasts until
-- `deadline` unless its writer tries again. A lapsed place counts for nothing; it is deleted by
-- the next waiting writer's attempt on the name, or by `rw_sweep`.
CREATE TABLE IF NOT EXISTS distlock.rw_waiting_writers (
    key      bytea       NOT NULL,
    owner    text        NOT NULL,
    deadline timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);

-- Milliseconds from `p_now` to `p_at`, rounded up, never negative (NULL for no `p_at`).
CREATE OR REPLACE FUNCTION distlock.rw_ms_left(p_at timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT greatest(0, ceil(extract(epoch FROM (p_at - p_now)) * 1000))::bigint
$$;

-- Announces a change of `key` on its channel: to one waiter per client (an empty payload, as
-- a release of the lock), or (`p_every`, payload `all`) to every waiter (a writer left: every
-- waiting reader may come in).
CREATE OR REPLACE FUNCTION distlock.rw_announce(p_key bytea, p_every boolean)
RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify(distlock.channel(p_key), CASE WHEN p_every THEN 'all' ELSE '' END)
$$;

-- The earliest deadline of the live places of writers waiting for `key` (NULL: none waits).
-- It only reads: lapsed places are deleted by a writer's step that holds the name's `rw_locks`
-- row (and by `rw_sweep`), so no step locks places before that row, and none can deadlock.
CREATE OR REPLACE FUNCTION distlock.rw_first_waiting_writer(p_key bytea, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min(deadline) FROM distlock.rw_waiting_writers WHERE key = p_key AND deadline > p_now
$$;

-- After an owner's last read hold of `key` went, or its writer's last write hold (`p_every`;
-- the caller has cleared the writer and set read mode), with the `rw_locks` row locked: the
-- lock stays as long as the longest live read hold left (a downgraded reader that crashes holds
-- it no longer than its own lease), stays with its writer, or goes. A writer leaving is
-- announced to every waiter; the last reader leaving to one, or to every waiter while a writer
-- waits (it must be among those woken).
CREATE OR REPLACE FUNCTION distlock.rw_settle(p_key bytea, p_now timestamptz, p_every boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_longest timestamptz;
    v_writer text;
BEGIN
    SELECT max(h) INTO v_longest
      FROM distlock.rw_readers r, unnest(r.holds) AS h
     WHERE r.key = p_key AND h > p_now;
    IF v_longest IS NOT NULL THEN
        -- In write mode the write hold's lease stands: read holds may lengthen it, never cut it.
        UPDATE distlock.rw_locks
           SET expires_at = CASE WHEN writer IS NULL THEN v_longest
                                 ELSE greatest(expires_at, v_longest) END
         WHERE key = p_key;
        IF p_every THEN
            PERFORM distlock.rw_announce(p_key, true);
        END IF;
        RETURN;
    END IF;
    SELECT writer INTO v_writer FROM distlock.rw_locks WHERE key = p_key;
    IF v_writer IS NOT NULL THEN
        RETURN;
    END IF;
    DELETE FROM distlock.rw_locks WHERE key = p_key;
    PERFORM distlock.rw_announce(p_key,
        p_every OR distlock.rw_first_waiting_writer(p_key, p_now) IS NOT NULL);
END
$$;

-- One read acquire attempt. Granted: `holds` is the owner's live read holds after it, `token`
-- the fencing token when one was asked for. Not granted: `holds` is 0 and `ttl_ms` how long to
-- wait at most (the lock's remaining lease, or a waiting writer's place).
--
-- Granted when the lock is free, held in read mode, or held in write mode by this owner (a
-- downgrade); while a writer of a writer-preferring side waits, only to an owner that already
-- holds a read hold or the write side. The owner's lapsed read holds are forgotten first.
CREATE OR REPLACE FUNCTION distlock.rw_read_acquire(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean,
    OUT holds integer, OUT token bigint, OUT ttl_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_lock distlock.rw_locks%ROWTYPE;
    v_found boolean;
    v_now timestamptz;
    v_until timestamptz;
    v_holds timestamptz[];
    v_live timestamptz[];
    v_mine integer := 0;
    v_first_writer timestamptz;
BEGIN
    LOOP
        SELECT * INTO v_lock FROM distlock.rw_locks WHERE key = p_key FOR UPDATE;
        v_found := FOUND;
        v_now := clock_timestamp();
        v_until := v_now + p_lease_ms * interval '1 millisecond';
        IF v_found AND v_lock.expires_at <= v_now THEN
            DELETE FROM distlock.rw_locks WHERE key = p_key;
            v_found := false;
        END IF;
        IF v_found THEN
            SELECT r.holds INTO v_holds
              FROM distlock.rw_readers r
             WHERE r.key = p_key AND r.owner = p_owner;
            IF FOUND THEN
                v_live := ARRAY(SELECT h FROM unnest(v_holds) AS h WHERE h > v_now);
                v_mine := cardinality(v_live);
                IF v_mine = 0 THEN
                    DELETE FROM distlock.rw_readers WHERE key = p_key AND owner = p_owner;
                ELSIF v_mine < cardinality(v_holds) THEN
                    UPDATE distlock.rw_readers SET holds = v_live
                     WHERE key = p_key AND owner = p_owner;
                END IF;
            END IF;
        END IF;

        v_first_writer := distlock.rw_first_waiting_writer(p_key, v_now);
        IF v_first_writer IS NOT NULL
           AND NOT (v_found AND (v_mine > 0 OR v_lock.writer IS NOT DISTINCT FROM p_owner)) THEN
            holds := 0;
            ttl_ms := distlock.rw_ms_left(
                least(v_first_writer, CASE WHEN v_found THEN v_lock.expires_at END), v_now);
            RETURN;
        END IF;

        IF NOT v_found THEN
            INSERT INTO distlock.rw_locks (key, name, mode, expires_at)
            VALUES (p_key, p_name, 'read', v_until)
            ON CONFLICT (key) DO NOTHING;
            IF NOT FOUND THEN
                CONTINUE;  -- a concurrent step took the free lock first: look again
            END IF;
            INSERT INTO distlock.rw_readers (key, owner, holds) VALUES (p_key, p_owner, ARRAY[v_until]);
            holds := 1;
        ELSIF v_lock.mode = 'read' OR v_lock.writer IS NOT DISTINCT FROM p_owner THEN
            INSERT INTO distlock.rw_readers AS r (key, owner, holds)
            VALUES (p_key, p_owner, ARRAY[v_until])
            ON CONFLICT (key, owner) DO UPDATE SET holds = r.holds || v_until
            RETURNING cardinality(r.holds) INTO holds;
            -- Only lengthen: the other holds count on their own leases.
            UPDATE distlock.rw_locks SET expires_at = greatest(expires_at, v_until)
             WHERE key = p_key;
        ELSE
            holds := 0;
            ttl_ms := distlock.rw_ms_left(v_lock.expires_at, v_now);
            RETURN;
        END IF;

        IF p_fencing THEN
            token := distlock.next_token(p_key);
        END IF;
        RETURN;
    END LOOP;
END
$$;

-- Gives back read holds of `owner` on `key`: one, the one ending first (`p_keep` NULL, a
-- release), or down to `p_keep`, keeping the longest (an abandon). Returns the owner's read
-- holds left (0: none any more, which may free the lock), or -1 when it held none.
CREATE OR REPLACE FUNCTION distlock.rw_read_release(p_key bytea, p_owner text, p_keep integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_expires timestamptz;
    v_holds timestamptz[];
    v_now timestamptz;
    v_keep integer;
BEGIN
    SELECT expires_at INTO v_expires FROM distlock.rw_locks WHERE key = p_key FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_expires <= v_now THEN
        RETURN -1;
    END IF;
    SELECT r.holds INTO v_holds FROM distlock.rw_readers r WHERE r.key = p_key AND r.owner = p_owner;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    v_keep := coalesce(p_keep, cardinality(v_holds) - 1);
    IF cardinality(v_holds) <= v_keep THEN
        RETURN cardinality(v_holds);
    END IF;
    IF v_keep > 0 THEN
        -- Guards are released in any order: the holds left must last as long as the leases
        -- their guards count on.
        UPDATE distlock.rw_readers
           SET holds = ARRAY(SELECT h FROM unnest(v_holds) AS h ORDER BY h DESC LIMIT v_keep)
         WHERE key = p_key AND owner = p_owner;
        RETURN v_keep;
    END IF;
    DELETE FROM distlock.rw_readers WHERE key = p_key AND owner = p_owner;
    PERFORM distlock.rw_settle(p_key, v_now, false);
    RETURN 0;
END
$$;

-- Renews many read holds in one statement: for each entry, whether its owner still had a live
-- read hold of the lock (its live holds and the lock then last at least `now + lease`). Entries
-- for the same key and owner are folded, the longest lease kept; rows are locked in key order,
-- so two batches cannot deadlock. Lapsed holds stay lapsed.
CREATE OR REPLACE FUNCTION distlock.rw_read_renew(
    p_keys bytea[], p_owners text[], p_leases_ms bigint[])
RETURNS boolean[]
LANGUAGE plpgsql AS $$
DECLARE
    v_locked bytea[];
    v_now timestamptz;
    v_renewed boolean[];
BEGIN
    -- Only the rows locked here are renewed: a lock inserted meanwhile (visible to the next
    -- statement) holds no hold of these owners' that this batch may renew out of key order.
    SELECT coalesce(array_agg(key), '{}') INTO v_locked
      FROM (SELECT l.key FROM distlock.rw_locks l WHERE l.key = ANY (p_keys)
             ORDER BY l.key FOR UPDATE) locked;
    v_now := clock_timestamp();
    WITH entries AS (
        SELECT e.key, e.owner, e.lease_ms, e.i
          FROM unnest(p_keys, p_owners, p_leases_ms) WITH ORDINALITY AS e(key, owner, lease_ms, i)
    ), folded AS (
        SELECT key, owner, max(lease_ms) AS lease_ms FROM entries GROUP BY key, owner
    ), renewed AS (
        UPDATE distlock.rw_readers r
           SET holds = ARRAY(
                   SELECT CASE WHEN h > v_now
                               THEN greatest(h, v_now + f.lease_ms * interval '1 millisecond')
                               ELSE h END
                     FROM unnest(r.holds) AS h)
          FROM folded f, distlock.rw_locks l
         WHERE r.key = f.key AND r.owner = f.owner
           AND l.key = r.key AND l.key = ANY (v_locked) AND l.expires_at > v_now
           AND EXISTS (SELECT 1 FROM unnest(r.holds) AS h WHERE h > v_now)
        RETURNING r.key, r.owner, f.lease_ms
    ), lengthened AS (
        UPDATE distlock.rw_locks l
           SET expires_at = greatest(l.expires_at, v_now + m.lease_ms * interval '1 millisecond')
          FROM (SELECT key, max(lease_ms) AS lease_ms FROM renewed GROUP BY key) m
         WHERE l.key = m.key
    )
    SELECT coalesce(array_agg(EXISTS (
               SELECT 1 FROM renewed r WHERE r.key = e.key AND r.owner = e.owner) ORDER BY e.i),
           '{}')
      INTO v_renewed
      FROM entries e;
    RETURN v_renewed;
END
$$;

-- One write acquire attempt. Granted (`holds` > 0, `token` when asked for): the lock was free,
-- or this owner holds the write side (a re-entry). `holds` -1: the owner reads and does not
-- write (an upgrade would wait for itself); nothing changed. `holds` 0: held; `ttl_ms` how long
-- to wait at most. With `p_queue_ms` (a writer-preferring writer that waits) a writer not
-- granted records its place for that long, and tries again before it lapses.
CREATE OR REPLACE FUNCTION distlock.rw_write_acquire(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean,
    p_queue_ms bigint,
    OUT holds integer, OUT token bigint, OUT ttl_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_lock distlock.rw_locks%ROWTYPE;
    v_found boolean;
    v_now timestamptz;
    v_until timestamptz;
BEGIN
    LOOP
        SELECT * INTO v_lock FROM distlock.rw_locks WHERE key = p_key FOR UPDATE;
        v_found := FOUND;
        v_now := clock_timestamp();
        v_until := v_now + p_lease_ms * interval '1 millisecond';
        IF v_found AND v_lock.expires_at <= v_now THEN
            DELETE FROM distlock.rw_locks WHERE key = p_key;
            v_found := false;
        END IF;

        IF NOT v_found THEN
            INSERT INTO distlock.rw_locks (key, name, mode, writer, writes, expires_at)
            VALUES (p_key, p_name, 'write', p_owner, 1, v_until)
            ON CONFLICT (key) DO NOTHING;
            IF NOT FOUND THEN
                CONTINUE;  -- a concurrent step took the free lock first: look again
            END IF;
            holds := 1;
        ELSIF v_lock.writer = p_owner THEN
            UPDATE distlock.rw_locks
               SET writes = writes + 1, expires_at = greatest(expires_at, v_until)
             WHERE key = p_key
            RETURNING writes INTO holds;
        ELSIF v_lock.writer IS NULL AND EXISTS (
                SELECT 1 FROM distlock.rw_readers WHERE key = p_key AND owner = p_owner) THEN
            holds := -1;
            RETURN;
        ELSE
            holds := 0;
            ttl_ms := distlock.rw_ms_left(v_lock.expires_at, v_now);
            IF p_queue_ms IS NOT NULL THEN
                -- Holding the row: the places of writers that went away can go.
                DELETE FROM distlock.rw_waiting_writers WHERE key = p_key AND deadline <= v_now;
                INSERT INTO distlock.rw_waiting_writers AS w (key, owner, deadline)
                VALUES (p_key, p_owner, v_now + p_queue_ms * interval '1 millisecond')
                ON CONFLICT (key, owner) DO UPDATE SET deadline = excluded.deadline;
                -- Try again before the place lapses.
                ttl_ms := least(ttl_ms, p_queue_ms / 3);
            END IF;
            RETURN;
        END IF;

        DELETE FROM distlock.rw_waiting_writers WHERE key = p_key AND owner = p_owner;
        IF p_fencing THEN
            token := distlock.next_token(p_key);
        END IF;
        RETURN;
    END LOOP;
END
$$;

-- Gives back write holds of `owner` on `key`: one (`p_keep` NULL, a release: the lock then
-- lasts at least `now + lease`), or down to `p_keep` (an abandon: the expiry stays). Returns
-- the write holds left, or -1 when the owner did not hold the write side. The last one gone,
-- the lock is free, or stays in read mode while the owner's read holds last (a downgrade);
-- either way every waiter is told.
CREATE OR REPLACE FUNCTION distlock.rw_write_release(
    p_key bytea, p_owner text, p_keep integer, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_lock distlock.rw_locks%ROWTYPE;
    v_now timestamptz;
    v_left integer;
BEGIN
    SELECT * INTO v_lock FROM distlock.rw_locks WHERE key = p_key FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_lock.expires_at <= v_now OR v_lock.writer IS DISTINCT FROM p_owner THEN
        RETURN -1;
    END IF;
    IF p_keep IS NOT NULL AND v_lock.writes <= p_keep THEN
        RETURN v_lock.writes;
    END IF;
    v_left := coalesce(p_keep, v_lock.writes - 1);
    IF v_left > 0 THEN
        UPDATE distlock.rw_locks
           SET writes = v_left,
               expires_at = CASE WHEN p_keep IS NULL
                                 THEN greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
                                 ELSE expires_at END
         WHERE key = p_key;
        RETURN v_left;
    END IF;
    UPDATE distlock.rw_locks SET mode = 'read', writer = NULL, writes = NULL WHERE key = p_key;
    PERFORM distlock.rw_settle(p_key, v_now, true);
    RETURN 0;
END
$$;

-- Renews many write holds in one statement: for each entry, whether its owner still held the
-- write side (the lock then lasts at least `now + lease`). Rows are locked in key order.
CREATE OR REPLACE FUNCTION distlock.rw_write_renew(
    p_keys bytea[], p_owners text[], p_leases_ms bigint[])
RETURNS boolean[]
LANGUAGE plpgsql AS $$
DECLARE
    v_locked bytea[];
    v_now timestamptz;
    v_renewed boolean[];
BEGIN
    -- Only the rows locked here are renewed: a lock inserted meanwhile (visible to the next
    -- statement) holds no hold of these owners' that this batch may renew out of key order.
    SELECT coalesce(array_agg(key), '{}') INTO v_locked
      FROM (SELECT l.key FROM distlock.rw_locks l WHERE l.key = ANY (p_keys)
             ORDER BY l.key FOR UPDATE) locked;
    v_now := clock_timestamp();
    WITH entries AS (
        SELECT e.key, e.owner, e.lease_ms, e.i
          FROM unnest(p_keys, p_owners, p_leases_ms) WITH ORDINALITY AS e(key, owner, lease_ms, i)
    ), folded AS (
        SELECT key, owner, max(lease_ms) AS lease_ms FROM entries GROUP BY key, owner
    ), renewed AS (
        UPDATE distlock.rw_locks l
           SET expires_at = greatest(l.expires_at, v_now + f.lease_ms * interval '1 millisecond')
          FROM folded f
         WHERE l.key = f.key AND l.key = ANY (v_locked) AND l.writer = f.owner
           AND l.expires_at > v_now
        RETURNING l.key, l.writer
    )
    SELECT coalesce(array_agg(EXISTS (
               SELECT 1 FROM renewed r WHERE r.key = e.key AND r.writer = e.owner) ORDER BY e.i),
           '{}')
      INTO v_renewed
      FROM entries e;
    RETURN v_renewed;
END
$$;

-- Deletes the lock whoever holds it, when it is held in `p_mode` ('read' or 'write'), and
-- announces it (to every waiter after a writer, to one after readers). Returns whether it did.
CREATE OR REPLACE FUNCTION distlock.rw_force_release(p_key bytea, p_mode text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM distlock.rw_locks
     WHERE key = p_key AND mode = p_mode AND expires_at > clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM distlock.rw_announce(p_key, p_mode = 'write');
    RETURN true;
END
$$;

-- A writer of a writer-preferring side stops waiting for `key`. When it was the last writer
-- waiting, every waiter is told (the readers it held back may come in). Returns whether it
-- was waiting.
CREATE OR REPLACE FUNCTION distlock.rw_leave(p_key bytea, p_owner text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM distlock.rw_waiting_writers WHERE key = p_key AND owner = p_owner;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF distlock.rw_first_waiting_writer(p_key, clock_timestamp()) IS NULL THEN
        PERFORM distlock.rw_announce(p_key, true);
    END IF;
    RETURN true;
END
$$;

-- The live lock `key` in one snapshot: its mode (NULL: free), writer and write holds, remaining
-- lease in milliseconds, and each reader with its read hold count (lapsed holds included until
-- their owner's next acquire or release forgets them), in arrays of the same order.
CREATE OR REPLACE FUNCTION distlock.rw_state(p_key bytea,
    OUT mode text, OUT writer text, OUT writes integer, OUT ttl_ms bigint,
    OUT readers text[], OUT counts integer[])
LANGUAGE sql STABLE AS $$
    WITH t AS (SELECT clock_timestamp() AS now)
    SELECT l.mode, l.writer, l.writes, distlock.rw_ms_left(l.expires_at, t.now),
           coalesce(r.readers, '{}'), coalesce(r.counts, '{}')
      FROM t
      LEFT JOIN distlock.rw_locks l ON l.key = p_key AND l.expires_at > t.now
      LEFT JOIN LATERAL (
          SELECT array_agg(x.owner ORDER BY x.owner) AS readers,
                 array_agg(cardinality(x.holds) ORDER BY x.owner) AS counts
            FROM distlock.rw_readers x
           WHERE x.key = l.key) r ON true
$$;

-- Deletes up to `p_limit` read-write locks whose lease ran out more than `p_grace_ms` ago
-- (their readers with them), and the places of writers that went away as long ago. Returns how
-- many locks went.
CREATE OR REPLACE FUNCTION distlock.rw_sweep(p_grace_ms bigint, p_limit integer) RETURNS integer
LANGUAGE sql AS $$
    WITH places AS (
        DELETE FROM distlock.rw_waiting_writers
         WHERE (key, owner) IN (
                   SELECT key, owner FROM distlock.rw_waiting_writers
                    WHERE deadline < clock_timestamp() - p_grace_ms * interval '1 millisecond'
                    LIMIT p_limit
                      FOR UPDATE SKIP LOCKED)
    ), gone AS (
        DELETE FROM distlock.rw_locks
         WHERE key IN (SELECT key FROM distlock.rw_locks
                        WHERE expires_at < clock_timestamp() - p_grace_ms * interval '1 millisecond'
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;
