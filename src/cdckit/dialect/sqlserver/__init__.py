"""SQL Server: CDC change tables read over pyodbc (capture instances, LSNs, update pairs, watermarked snapshots)."""
