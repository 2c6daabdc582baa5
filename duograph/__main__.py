"""``python -m duograph``: the ``duograph`` command (see ``duograph.cli``)."""
import sys

from .cli import main

sys.exit(main())
