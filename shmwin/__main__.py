"""``python -m shmwin``: the inspector CLI."""

import sys

from .cli import main

sys.exit(main())
