"""scripts/device_pass.py, the one driver of GPU work, parses its flags into the commands it runs (dry runs on CPU)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "device_pass.py"
ENV = ("OUT", "BACKENDS", "PROFILE", "SEED", "SPEC", "SHARDS", "RUN_S", "RETRY_S", "SKIP_GPU_TESTS", "GPU_S",
       "SWEEP_SPEC", "SWEEP_WHERE", "SWEEP_S", "DEADLINE_S")  # fmt: skip


@pytest.fixture
def device_pass(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("device_pass", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "device_pass", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _dry(device_pass: ModuleType, capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert device_pass.main([*argv, "--dry-run"]) == 0
    # the install of carried wheels (a checkout with a .whl/ folder) is not what these tests are about
    return [line for line in capsys.readouterr().out.splitlines() if " pip install " not in line]


def test_pass_runs_each_shard_in_its_time_box_then_gpu_tests_and_a_sweep(device_pass, capsys, tmp_path) -> None:
    lines = _dry(device_pass, capsys, "--out", str(tmp_path), "--backend", "fast", "--shards", "2", "--seed", "3",
                 "--run-s", "120", "--sweep-spec", "cast.fp8", "--sweep-where", "rounding == 'rne'")  # fmt: skip
    shards = [line for line in lines if "conformance.cli run --backend fast" in line and "--shard" in line]
    assert [("--shard 1/2" in s, "--shard 2/2" in s) for s in shards[:2]] == [(True, False), (False, True)]
    assert all("timeout 120 " in s and "--seed 3" in s and "--profile default" in s for s in shards)
    assert any("report merge --report" in line for line in lines)
    assert not any("reports/matrix" in line for line in lines), "one backend: no matrix"
    assert any("pytest tests -m gpu" in line and str(tmp_path / "gpu-junit.xml") in line for line in lines)
    assert any("--benchmark-json " + str(tmp_path / "bench.json") in line for line in lines)
    (sweep,) = [line for line in lines if "--profile exhaustive" in line]
    assert "--spec cast.fp8 --where 'rounding == '\"'\"'rne'\"'\"''" in sweep
    assert not tmp_path.joinpath("env.txt").exists(), "a dry run writes nothing"


def test_pass_takes_its_defaults_from_the_shell_drivers_variables(device_pass, capsys, monkeypatch) -> None:
    for name, value in {"BACKENDS": "torch fast", "SEED": "7", "SHARDS": "3", "RUN_S": "90", "PROFILE": "smoke",
                        "SKIP_GPU_TESTS": "1", "SPEC": "cast.*"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    lines = _dry(device_pass, capsys)  # no command: the device pass
    runs = [line for line in lines if "conformance.cli run" in line and "<contract>" not in line]
    assert len(runs) == 6 and "--backend torch" in runs[0] and "--backend fast" in runs[3]
    assert all(
        "timeout 90 " in r and "--seed 7" in r and "--profile smoke" in r and "--spec 'cast.*'" in r for r in runs
    )
    assert not any("pytest" in line for line in lines)
    (matrix,) = [line for line in lines if line.endswith("/reports/matrix")]
    assert "reports/torch/report.json" in matrix and "reports/fast/report.json" in matrix


def test_sweep_selections_within_a_deadline(device_pass, capsys, tmp_path) -> None:
    lines = _dry(device_pass, capsys, "sweep", "--out", str(tmp_path), "--deadline-s", "400", "cast.int|",
                 "cast.fp4|rounding == 'stochastic'")  # fmt: skip
    sweeps = [line for line in lines if "--profile exhaustive" in line]
    assert "--spec cast.int --report" in sweeps[0] and "--where" not in sweeps[0]
    assert "--spec cast.fp4 --where" in sweeps[1] and sweeps[0].startswith("would run: timeout 400 ")
    with pytest.raises(SystemExit) as exit_:
        device_pass.main(["sweep", "|rounding == 'rne'", "--dry-run"])
    assert exit_.value.code == 2


def test_bench_and_xdist(device_pass, capsys, tmp_path) -> None:
    (bench,) = _dry(device_pass, capsys, "bench", "--out", str(tmp_path), "-k", "nvfp4", "tests/bench/test_bench_mx.py")
    assert "pytest tests/bench/test_bench_mx.py -m bench" in bench and bench.endswith("-k nvfp4")
    lines = _dry(device_pass, capsys, "xdist", "--out", str(tmp_path), "--gpus", "0,1", "--spec", "quant.fp8_*")
    assert ["-n 2 --qconform-gpus 0,1" in lines[0], "-n 1 --qconform-gpus 0 " in lines[1]] == [True, True]
    assert all("TRITON_CACHE_DIR=" in line and "--qconform-spec 'quant.fp8_*'" in line for line in lines)


def test_bad_numbers_are_usage_errors(device_pass, capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit) as exit_:
        device_pass.main(["pass", "--shards", "0", "--dry-run"])
    assert exit_.value.code == 2 and "--shards must be at least 1" in capsys.readouterr().err
    monkeypatch.setenv("SEED", "x")
    with pytest.raises(SystemExit, match="SEED='x' is not an integer"):
        device_pass.main(["--dry-run"])


def test_the_nox_sessions_call_the_script() -> None:
    noxfile = (SCRIPT.parents[1] / "noxfile.py").read_text()
    for session, command in (("gpu", "pass"), ("bench", "bench"), ("sweep", "sweep")):
        assert f"def {session}(session" in noxfile
        assert f'session.run("python", DEVICE_PASS, "{command}", *session.posargs)' in noxfile


def test_a_backends_pieces_exclude_a_backend_whose_name_extends_it(device_pass, tmp_path) -> None:
    for name in ("fast-1", "fast-2-cast.fp8", "fast-triton-1", "fast"):
        (tmp_path / name).mkdir()
    assert [p.name for p in device_pass._pieces(tmp_path, "fast")] == ["fast-1", "fast-2-cast.fp8"]
