"""`python -m alphagate_lab.bench.decisions`: see alphagate_lab.bench.decisions.cli."""

from alphagate_lab.bench.decisions.cli import main

raise SystemExit(main())
