"""Run every benchmark in turn (make bench). Each prints its own numbers and conditions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for script in sorted(HERE.glob("bench_*.py")):
    print(f"\n===== {script.name} =====", flush=True)
    subprocess.run([sys.executable, str(script)], cwd=HERE, check=False)
