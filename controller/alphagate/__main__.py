"""`python -m alphagate` runs the command line."""

from alphagate.cli import main

main()
