"""DuckDB on the tables of `kop pipeline tables`, offline: its iceberg extension LOADed from a file, not downloaded.

DuckDB installs an extension from its own repository on first use (`INSTALL iceberg`), which a machine without
a route to extensions.duckdb.org cannot do. The PyPI packages duckdb-extension-iceberg and duckdb-extension-avro
(the iceberg extension reads Iceberg's Avro manifests through the avro one, and would try to download it) ship
the extension files, built for exactly one DuckDB version: `connect()` LOADs them by path, with automatic
installs and loads off and a throw-away extension directory, so nothing is fetched and nothing is written to
~/.duckdb. A duckdb whose version has no file in those packages is an error naming the versions, not a download.
Used by tests/e2e/test_spark_tables.py and bench/tables.py; docs/spark.md shows the same for a user.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kop.pipeline.kafka_meta import PipelineError

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

EXTENSIONS = ("avro", "iceberg")  # in load order: iceberg needs avro


def extension_file(name: str, version: str) -> Path:
    """The `name` extension's file for DuckDB `version` ("1.5.5") in the duckdb-extension-<name> package."""
    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError as e:
        raise PipelineError(f"DuckDB's {name} extension: pip install duckdb-extension-{name}=={version}") from e
    base = Path(str(module.__file__)).parent / "extensions"
    path = base / f"v{version}" / f"{name}.duckdb_extension"
    if not path.is_file():
        have = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
        raise PipelineError(f"duckdb-extension-{name} has no {name} extension for duckdb {version} (it has "
                            f"{', '.join(have) or 'none'}): install the same version of both")
    return path


def connect() -> DuckDBPyConnection:
    """A DuckDB connection (in memory) with the iceberg extension loaded: `iceberg_scan('<warehouse>/<namespace>/
    <table>')` reads a table of the Hadoop catalog from its version-hint.text."""
    import duckdb

    con = duckdb.connect(config={"extension_directory": tempfile.mkdtemp(prefix="kop-duckdb-"),
                                 "autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for name in EXTENSIONS:
            con.execute(f"LOAD '{extension_file(name, duckdb.__version__)}'")
    except BaseException:
        con.close()
        raise
    return con
