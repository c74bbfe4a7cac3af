"""`pip install .` (not editable) gives a package that works outside a clone.

The wheel is built from this checkout and installed with --no-deps into a fresh virtualenv in a
temporary folder; the dependencies come from the running environment through a path entry (so
the test needs no network and no second copy of torch), never rbplab itself. Commands then run
from a folder outside the repository, without RBPLAB_DATA.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.install  # builds a wheel and installs it into a fresh virtualenv


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next(work.glob("rbplab-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Dependencies from this environment; rbplab's own editable hook is a .pth file there, which a
    # plain path entry does not run, so only the wheel's copy of rbplab is importable.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    outside = work / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RBPLAB_DATA", "PYTHONPATH")}
    return {"wheel": wheel, "bin": venv / "bin", "cwd": outside, "env": env}


def run(installed: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(installed["bin"] / argv[0]), *argv[1:]],
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_wheel_carries_registry_and_notebooks(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert "rbplab/catalog/families.csv" in names
    assert {f"rbplab/notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")} <= set(names)
    assert not any(n.startswith(("data/", "rbplab/data/")) for n in names)  # the bundled data stays out


def test_wheel_carries_every_module_of_the_checkout(installed):
    """pyproject lists the packages by hand: a subpackage left off that list (store.cache,
    viz.plots and viz.widgets were once) is missing from the wheel while the checkout works."""
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "rbplab").rglob("*.py")}
    assert modules - names == set()
    proc = run(installed, "python", "-c", "import rbplab.store.cache, rbplab.viz.plots, rbplab.viz.widgets")
    assert proc.returncode == 0, proc.stderr


def test_installed_package_is_the_wheel_not_the_checkout(installed):
    proc = run(installed, "python", "-c", "import rbplab; print(rbplab.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout.strip().startswith(str(ROOT)), proc.stdout


def test_families_and_report_help_work_outside_a_clone(installed):
    families = run(installed, "rbplab", "families")
    assert families.returncode == 0, families.stderr
    assert "pythia" in families.stdout and "micro" in families.stdout
    helptext = run(installed, "rbplab", "report", "--help")
    assert helptext.returncode == 0 and "--output-dir" in helptext.stdout, helptext.stderr
    module = run(installed, "python", "-m", "rbplab", "families", "pythia")
    assert module.returncode == 0 and "pythia-14m" in module.stdout, module.stderr


def test_installed_notebooks_are_found(installed):
    proc = run(
        installed,
        "python",
        "-c",
        "from rbplab.report.execution import list_notebooks; print(len(list_notebooks()))",
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == len(list((ROOT / "notebooks").glob("*.ipynb")))


def test_missing_bundled_data_says_how_to_get_it(installed):
    proc = run(installed, "rbplab", "extract", "-m", "micro-1-25K", "-c", "humaneval", "--no-progress")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "RBPLAB_DATA" in lines[0] and "checkout" in lines[0], proc.stderr
    listing = run(installed, "rbplab", "corpora")  # hub corpora are still listed
    assert listing.returncode == 0 and "hub:wikipedia" in listing.stdout, listing.stderr


def test_installing_the_wheel_keeps_the_users_torch(installed, tmp_path):
    """A researcher's environment holds its own torch (a CUDA build, an older release): installing
    rbplab must not replace it. The environment here is a venv that sees this one's packages, with a
    torch 2.9.0 distribution (metadata only: pip never imports it) in front of them; pip, offline and
    asked for the wheel alone, must find every requirement satisfied and install rbplab only (a pin
    such as torch==2.13.0 would need a download and fail here)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    dist = site / "torch-2.9.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\n")
    (dist / "INSTALLER").write_text("pip\n")
    (dist / "RECORD").write_text("")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--dry-run",
            "--no-index",
            "--report",
            "-",
            "-q",
            str(installed["wheel"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    report = json.loads(done.stdout)
    assert [item["metadata"]["name"] for item in report["install"]] == ["rbplab"]
