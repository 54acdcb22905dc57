import sys

from cdckit.cli import main

sys.exit(main())
