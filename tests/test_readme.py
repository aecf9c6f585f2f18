"""The README's BoTorch example runs as printed and finds a good point."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_optimize_acqf_example_runs(tmp_path):
    (code,) = [b for b in _python_blocks() if "optimize_acqf(" in b]
    script = tmp_path / "example.py"
    script.write_text("import torch\ntorch.set_num_threads(1)\ntorch.manual_seed(0)\n" + code)
    res = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    best, opt = map(float, re.search(r"best value (\S+) \(optimum (\S+)\)", res.stdout).groups())
    assert best > 2.5 and opt > best - 1e-9  # Hartmann-3 optimum 3.863; 8 random points ~1


def test_readme_bench_registration_example_runs(tmp_path):
    (code,) = [b for b in _python_blocks() if "run_bench(" in b]
    script = tmp_path / "bench_example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mean" in done.stdout
