"""scripts/screenshot_viewer.py loaded as a module: its browser helpers drive the viewer tests too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_viewer.py"
_spec = importlib.util.spec_from_file_location("screenshot_viewer", SCRIPT)
shots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shots)
