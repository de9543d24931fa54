-- The version this directory installs; the last file, so a failed install leaves none.

DELETE FROM distlock.schema_version;
INSERT INTO distlock.schema_version (version) VALUES (1);
