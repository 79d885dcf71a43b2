import sys

from queueing.cli import main

sys.exit(main())
