-- Listing (`distlock list`): the names that hold something in any kind of the family.

-- Up to `p_limit` names (the bytes as given), in byte order, starting after `p_after` (NULL: from
-- the first): live locks (plain, fair, elections), live read-write locks, semaphores and open
-- latches. The client matches them against its pattern, so `p_limit` bounds the rows looked
-- at, as `SCAN`'s count does on Redis.
CREATE OR REPLACE FUNCTION distlock.names(p_after bytea, p_limit integer)
RETURNS TABLE (name bytea)
LANGUAGE sql STABLE AS $$
    SELECT n.name FROM (
        SELECT l.name FROM distlock.locks l WHERE l.expires_at > clock_timestamp()
        UNION SELECT r.name FROM distlock.rw_locks r WHERE r.expires_at > clock_timestamp()
        UNION SELECT s.name FROM distlock.semaphores s
        UNION SELECT c.name FROM distlock.latches c WHERE c.count > 0
    ) n
    WHERE p_after IS NULL OR n.name > p_after
    ORDER BY n.name
    LIMIT p_limit
$$;
