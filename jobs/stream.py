"""spark-submit entry point: stream changes (after the snapshot when snapshot.mode asks for one).

    spark-submit --py-files cdckit.zip jobs/stream.py connector.json [--set key=value ...]
"""

import sys

from cdckit.cli import main

if __name__ == "__main__":
    sys.exit(main(["stream", *sys.argv[1:]]))
