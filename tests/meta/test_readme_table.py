"""The README's contract table is ``qconform list --markdown``'s output, and the listing needs no torch or Triton."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance.contract_table import BEGIN, END, markdown_table, replace_table, source_projects
from conformance.registry import load_specs

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"


def test_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README.md needs the contract table's two markers"
    start = text.index(BEGIN)
    table = text[start : text.index(END) + len(END)] + "\n"
    message = "README.md's table is stale: run `python3 -m conformance.contract_table README.md`"
    assert table == markdown_table(load_specs()), message


def test_replace_table_keeps_the_text_around_the_markers() -> None:
    text = f"intro\n{BEGIN}\nold\n{END}\noutro\n"
    assert replace_table(text, f"{BEGIN}\nnew\n{END}\n") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"


def test_readme_stays_short() -> None:
    assert len(README.read_bytes()) <= 10 * 1024


def test_every_spec_states_its_status() -> None:
    missing = [s.contract for s in load_specs() if "status" not in s.raw]
    assert not missing, f"specs without a status: {missing}"


def test_source_projects_in_order_of_first_mention() -> None:
    sources = ["TransformerEngine common/x.cu and torchao to_mx", "torch 2.13 .to(float8_e8m0fnu)", "pytorch/ao@1"]
    assert source_projects(sources) == ["TE", "torchao", "torch"]
    assert source_projects(["the per-member contracts"]) == []


def test_list_imports_neither_torch_nor_triton() -> None:
    code = (
        "import json, sys\n"
        "from conformance.cli import main\n"
        "assert main(['list']) == 0 and main(['list', '--markdown']) == 0\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
