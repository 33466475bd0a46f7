"""`python -m cli ...` is `lfm-chat ...` (tests start subprocesses this way)."""

import sys

from cli.main import main

sys.exit(main())
