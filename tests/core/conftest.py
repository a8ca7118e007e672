"""Puts this folder on sys.path so tests import the traffic generator as `longtraffic`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
