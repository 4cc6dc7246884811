"""Entry point of ``python -m build_scripts``."""

import sys

from build_scripts.cli import main

sys.exit(main())
