"""Every Python block of ARCHITECTURE.md runs as printed (in its own process) and prints what
its comments claim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "ARCHITECTURE.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)

#: a block's experiment module would live at this path (``__file__`` for harness.results_dir)
EPILOGUE = """
if "main" in globals():
    import json, sys
    from pathlib import Path
    out = Path(sys.argv[1])
    assert main(["--quick", "--out", str(out)]) == 0
    print(json.loads((out / "results.json").read_text()))
"""


def test_the_page_has_the_examples_it_promises():
    assert len(BLOCKS) >= 5  # a model, an acquisition, a problem, a strategy, an experiment


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs_and_prints_its_claims(index, tmp_path):
    code = BLOCKS[index]
    script = tmp_path / "experiments" / "demo" / "block.py"
    script.parent.mkdir(parents=True)
    script.write_text("import torch\ntorch.set_default_dtype(torch.float64)\n" + code + EPILOGUE)
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    for line in code.splitlines():  # print(...)  # expected
        m = re.match(r"\s*print\(.*\)\s+#\s+(.+)$", line)
        if m:
            assert m.group(1).strip() in res.stdout, (m.group(1), res.stdout)
