"""`python -m rbplab`: the command line."""

import sys

from rbplab.cli.app import main

sys.exit(main())
