"""`python -m alphagate_lab.bench.machine`: see alphagate_lab.bench.machine.cli."""

from alphagate_lab.bench.machine.cli import main

raise SystemExit(main())
