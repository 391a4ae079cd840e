"""``python -m app.cli``: the same as the ``memory-mcp`` command."""

import sys

from app.cli import main

sys.exit(main())
