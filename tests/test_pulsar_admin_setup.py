"""Where pulsar-admin's jars live and how scripts/setup's step 5a decides they are complete.

One rule for scripts/setup and tests/support/pulsar_admin_cli.py: .cache/pulsar-admin-<pulsar.admin.version of
tools/java/pulsar-admin/pom.xml>, KOP_PULSAR_ADMIN_LIBS overriding it. Complete = the classes the tests run are in
the folder's jars: a folder that has them but no stamp (fetched by hand with the same pom) is adopted - stamped,
not fetched again, as is one stamped for an older pom - and one that lacks them is fetched, which without mvn is a loud failure, never a skip.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.java import REPO_ROOT, JavaToolsMissing
from tests.support.pulsar_admin_cli import ADMIN_POM, CliResult, pulsar_admin_libs, pulsar_admin_version

SETUP = REPO_ROOT / "scripts" / "setup"
REQUIRED = ["org/apache/pulsar/admin/cli/PulsarAdminTool", "org/apache/pulsar/admin/cli/CmdTopics",
            "org/apache/pulsar/client/admin/internal/PulsarAdminImpl", "picocli/CommandLine"]


def _jar(path: Path, classes: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for c in classes:
            z.writestr(f"{c}.class", b"")


def _setup(libs: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KOP_SETUP_ONLY": "pulsar-admin", "KOP_PULSAR_ADMIN_LIBS": str(libs)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=120)


def test_version_and_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert pulsar_admin_version() == "5.0.1"  # the only pulsar-client-tools served (tools/java/pulsar-admin/pom.xml)
    monkeypatch.setenv("KOP_PULSAR_ADMIN_LIBS", str(tmp_path / "none"))
    with pytest.raises(JavaToolsMissing, match="KOP_SETUP_ONLY=pulsar-admin"):
        pulsar_admin_libs()
    _jar(tmp_path / "none" / "pulsar-client-tools-5.0.1.jar", REQUIRED)
    with pytest.raises(JavaToolsMissing):  # no stamp yet: scripts/setup has not checked it
        pulsar_admin_libs()
    (tmp_path / "none" / ".complete").write_text("x\n")
    assert pulsar_admin_libs() == tmp_path / "none"


def test_setup_adopts_a_complete_folder_without_fetching(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    _jar(libs / "pulsar-client-tools-5.0.1.jar", REQUIRED[:2])
    _jar(libs / "other.jar", REQUIRED[2:])
    done = _setup(libs)
    assert done.returncode == 0, done.stderr
    assert f"pulsar-admin 5.0.1 jars found complete in {libs} (2 jars): stamped" in done.stderr
    assert (libs / ".complete").read_text() == hashlib.sha256(ADMIN_POM.read_bytes()).hexdigest() + "\n"
    again = _setup(libs)
    assert again.returncode == 0, again.stderr
    assert f"pulsar-admin 5.0.1 jars already in {libs} (2 jars)" in again.stderr
    (libs / ".complete").write_text("the hash of an older pom\n")  # a pom edit: kept, stamped anew, not fetched
    edited = _setup(libs)
    assert edited.returncode == 0, edited.stderr
    assert "found complete" in edited.stderr and (libs / "other.jar").exists()
    assert (libs / ".complete").read_text() == hashlib.sha256(ADMIN_POM.read_bytes()).hexdigest() + "\n"


def test_setup_fails_loudly_on_an_incomplete_folder_it_cannot_fetch(tmp_path: Path) -> None:
    """A folder without PulsarAdminTool is fetched anew; with no mvn on PATH that is an error naming mvn."""
    libs = tmp_path / "libs"
    _jar(libs / "pulsar-client-tools-5.0.1.jar", REQUIRED[1:])
    bin_dir = tmp_path / "bin"  # the commands the step uses, mvn left out
    bin_dir.mkdir()
    for tool in ("java", "sed", "head", "sha256sum", "cut", "cat", "unzip", "grep", "ls", "wc", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    done = _setup(libs, path=str(bin_dir))
    assert done.returncode == 1, done.stderr
    assert "mvn not found on PATH (needed to fetch pulsar-admin from Maven Central)" in done.stderr
    assert not (libs / ".complete").exists()


def test_cli_result() -> None:
    ok = CliResult(("tenants", "get", "t"), 0, '{\n  "adminRoles" : [ ]\n}\n', "")
    assert ok.json() == {"adminRoles": []}
    refused = CliResult(("tenants", "get", "t"), 1, "", "Tenant does not exist\n\nReason: Tenant does not exist\n")
    with pytest.raises(AssertionError, match="exited 1"):
        refused.check()
    assert CliResult(("tenants", "list"), 0, "public\n\npulsar\n", "").lines == ["public", "pulsar"]
