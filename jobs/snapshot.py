"""spark-submit entry point: take the initial snapshot.

    spark-submit --py-files cdckit.zip jobs/snapshot.py connector.json [--set key=value ...]
"""

import sys

from cdckit.cli import main

if __name__ == "__main__":
    sys.exit(main(["snapshot", *sys.argv[1:]]))
