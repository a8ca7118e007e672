"""`python -m alphagate.bench.machine`: see alphagate.bench.machine.cli."""

from alphagate.bench.machine.cli import main

raise SystemExit(main())
