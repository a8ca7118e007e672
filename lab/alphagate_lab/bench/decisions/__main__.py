"""`python -m alphagate.bench.decisions`: see alphagate.bench.decisions.cli."""

from alphagate.bench.decisions.cli import main

raise SystemExit(main())
