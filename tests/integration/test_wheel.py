"""The wheel `pip install .` builds, and so the job image, carries the library whole and none of the lab."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_every_library_module_and_no_lab_module(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("cdckit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    library = {str(path.relative_to(ROOT / "src")) for path in (ROOT / "src" / "cdckit").rglob("*.py")}
    assert library - names == set()
    assert not [name for name in names if name.startswith(("cdckit_lab", "cdckit/lab/")) or "demo" in name]
    lab = {str(path.relative_to(ROOT / "lab" / "src")) for path in (ROOT / "lab" / "src").rglob("*.py")}
    assert lab and not lab & names
