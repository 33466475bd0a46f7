"""`python -m bench`: the benchmark command line."""

from bench.cli import main

raise SystemExit(main())
