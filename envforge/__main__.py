"""``python -m envforge``: see :mod:`envforge.entry` (Ctrl-C at any moment is exit 130)."""

import sys

try:
    from envforge.entry import main
except KeyboardInterrupt:  # Ctrl-C while the line above loads envforge.entry
    import os

    sys.stderr.write("envforge: interrupted\n")
    sys.stderr.flush()
    os._exit(130)

raise SystemExit(main())
