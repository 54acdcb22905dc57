"""One package per database family: catalog, positions, snapshot reads, change reads, setup SQL."""
