"""Where the Pulsar jars live: one rule for scripts/setup and tests/support/pulsar_server.py.

The folder is named by tools/java/pulsar/pom.xml's pulsar.version (.cache/pulsar-libs-<version>), so a version
change fetches into a new folder and a shared .cache holds two versions side by side; KOP_PULSAR_LIBS overrides it.
These tests pin that the Python side and the setup script read the same version and honour the same override.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.java import REPO_ROOT, JavaToolsMissing
from tests.support.pulsar_server import BROKER_PROBE, PULSAR_POM, pom_pulsar_version, pulsar_libs_dir


def test_version_comes_from_the_pom(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project><properties><pulsar.version>9.8.7</pulsar.version></properties></project>")
    assert pom_pulsar_version(pom) == "9.8.7"
    pom.write_text("<project/>")
    with pytest.raises(JavaToolsMissing):
        pom_pulsar_version(pom)


def test_folder_is_named_by_the_version_unless_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KOP_PULSAR_LIBS", raising=False)
    assert pulsar_libs_dir() == REPO_ROOT / ".cache" / f"pulsar-libs-{pom_pulsar_version()}"
    monkeypatch.setenv("KOP_PULSAR_LIBS", str(tmp_path / "elsewhere"))
    assert pulsar_libs_dir() == tmp_path / "elsewhere"


def test_setup_reads_the_same_version_and_override(tmp_path: Path) -> None:
    """scripts/setup's Pulsar step, pointed at a folder stamped complete for the current pom, takes it as it is
    (no download) and names the pom's version: the same rule as pulsar_libs_dir()."""
    libs = tmp_path / "libs"
    version = pom_pulsar_version()
    for sub, jar in (("broker", f"pulsar-broker-{version}.jar"), ("client", f"pulsar-client-admin-{version}.jar")):
        (libs / sub).mkdir(parents=True)
        # a stand-in jar with the one class the setup's JDK check reads: a class file header for Java 21 (major 65),
        # as Pulsar 5's broker classes have, so the check must find a JDK 21+ as it does for the real jars
        with zipfile.ZipFile(libs / sub / jar, "w") as z:
            z.writestr(BROKER_PROBE[1], b"\xca\xfe\xba\xbe\x00\x00\x00\x41")
    (libs / ".complete").write_text(hashlib.sha256(PULSAR_POM.read_bytes()).hexdigest() + "\n")
    env = {**os.environ, "KOP_SETUP_ONLY": "pulsar", "KOP_PULSAR_LIBS": str(libs)}
    done = subprocess.run([str(REPO_ROOT / "scripts" / "setup")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"Pulsar {pom_pulsar_version()} jars already in {libs} (1 broker jars, 1 client jars)" in done.stderr
