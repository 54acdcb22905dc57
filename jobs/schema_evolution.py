"""spark-submit (or cron) entry point: rotate SQL Server capture instances after schema changes.

    spark-submit jobs/schema_evolution.py connector.json [--plan] [--set key=value ...]
"""

import sys

from cdckit.cli import main

if __name__ == "__main__":
    sys.exit(main(["schema-evolution", *sys.argv[1:]]))
