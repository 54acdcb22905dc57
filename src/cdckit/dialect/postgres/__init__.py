"""PostgreSQL and YugabyteDB: the catalog, the slot and publication, the snapshot under an exported snapshot, and the
pgoutput stream decoded into change events."""
